"""The server around every face: middleware, production hardening, overload answers,
input limits, the garbage collector, the locked Celery beat, /metrics and date formats."""
