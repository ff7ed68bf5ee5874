"""A real CAS 3.0 server for the sign-in tests: django-cas-server in its own Django project,
process and SQLite database (``serve.py``), never imported by the portal or the test process
(``process.py`` starts it)."""
