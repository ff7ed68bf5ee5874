"""The person's own account: the account page, notices, language and time zone, API tokens."""
