"""The sign-in URLs: the campus backends' own (each empty while it is off), and the logout
that ends the identity provider's session too where the protocol allows it."""

from __future__ import annotations

from django.urls import path

from portal.signin import cas, ldap, oidc, views

urlpatterns = [
    path("logout/", views.logout, name="logout"),
    *oidc.urlpatterns,
    *cas.urlpatterns,
    *ldap.urlpatterns,
]
