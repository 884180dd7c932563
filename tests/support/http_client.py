"""HTTP from tests: one request to the daemon (plain or TLS, basic auth), errors returned.

``fetch`` goes through ``urllib`` without proxies and returns HTTP error answers (401, 404,
503…) as a ``Reply`` instead of raising, so a test asserts on the status it got; ``basic``
builds the ``Authorization`` header, ``bcrypt_hash`` a password hash for a web config file
(cost 4: fast, and as valid for the server as any other cost).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any

import bcrypt

__all__ = ["Reply", "basic", "bcrypt_hash", "fetch"]


@dataclass
class Reply:
    """One HTTP answer: status code, headers, body."""

    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


def fetch(
    url: str,
    *,
    context: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
    method: str = "GET",
) -> Reply:
    """One request without proxies; HTTP errors are returned, not raised (``OSError`` for a
    connection that fails is)."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with opener.open(request, timeout=10) as response:
            return Reply(response.status, response.headers, response.read())
    except urllib.error.HTTPError as error:
        with error:
            return Reply(error.code, error.headers, error.read())


def basic(user: str, password: str) -> dict[str, str]:
    """The ``Authorization: Basic …`` header of ``user`` and ``password``."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash of ``password`` (cost 4) for ``basic_auth_users``."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
