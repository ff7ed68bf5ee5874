"""Campus sign-in: OIDC, CAS 3.0 and LDAP, each optional and configured by environment
variables (docs/signin.md). Every backend turns what the identity provider says into one
:class:`portal.signin.identity.CampusIdentity` and hands it to
:func:`portal.signin.identity.sync_person`, the one place that creates and updates accounts.
"""
