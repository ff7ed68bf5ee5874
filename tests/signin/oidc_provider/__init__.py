"""A minimal OpenID Connect provider for the sign-in tests: django-oauth-toolkit with OIDC on,
run in its own process with its own SQLite database (:mod:`.process` starts it)."""
