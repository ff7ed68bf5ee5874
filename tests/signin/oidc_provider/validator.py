"""The provider's claims: what a campus IdP releases about a person, by scope."""

from __future__ import annotations

from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator

from tests.signin.oidc_provider.settings import CAMPUS_DIRECTORY


class CampusValidator(OAuth2Validator):
    oidc_claim_scope = {
        **OAuth2Validator.oidc_claim_scope,
        "groups": "groups",
        "department": "groups",
    }

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        person = CAMPUS_DIRECTORY.get(user.username, {})
        claims = {
            # The directory may release another user name than the login (see .process).
            "preferred_username": person.get("claimed_username", user.username),
            "email": user.email,
            "given_name": user.first_name,
            "family_name": user.last_name,
            "name": f"{user.first_name} {user.last_name}".strip(),
            "groups": list(person.get("groups", [])),
            "department": person.get("department", ""),
        }
        return claims
