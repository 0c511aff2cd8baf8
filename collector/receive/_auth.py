"""The optional bearer token that every HTTP and gRPC endpoint of the collector asks for."""

from __future__ import annotations

import hmac

AUTHORIZATION = "authorization"
"""The header (HTTP) and metadata key (gRPC) carrying `Bearer <token>`."""


class BearerToken:
    """Checks `Authorization: Bearer <token>` in constant time; accepts everything when no token is set."""

    def __init__(self, token: str | None):
        self._token = token.encode() if token else None

    @property
    def required(self) -> bool:
        return self._token is not None

    def accepts(self, authorization: str | None) -> bool:
        if self._token is None:
            return True
        if not authorization:
            return False
        scheme, _, credential = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(credential.strip().encode("utf-8", "surrogateescape"), self._token)


def authorization_header(token: str | None) -> dict[str, str]:
    """The header a client sends for ``token`` (none when there is no token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}
