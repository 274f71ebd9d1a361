"""Which database a registry URL names, and how it is shown."""

from __future__ import annotations

import os
import re

from loopwright.registry.api import RegistryError

ENV = "LOOPWRIGHT_DATABASE_URL"
SCHEMES = ("postgresql://", "postgres://")


def chosen(url: str | None, default: str | None) -> tuple[str, str]:
    """("sqlite", path) or ("postgres", url) for ``url``, else $LOOPWRIGHT_DATABASE_URL, else
    the embedded file ``default``. RegistryError for a URL of another kind."""
    url = url or os.environ.get(ENV) or default
    if not url:
        raise RegistryError(f"no registry named: give --db URL or set ${ENV}")
    if url.startswith(SCHEMES):
        return "postgres", url
    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise RegistryError(
            f"unsupported database URL scheme {scheme!r}: use postgresql://… for PostgreSQL, or a file path "
            f"for SQLite (--db or ${ENV})"
        )
    if url.startswith("sqlite:"):
        url = url[len("sqlite:") :]
    return "sqlite", os.path.abspath(os.path.expanduser(url))


def shown(url: str) -> str:
    """``url`` with any password replaced by ***: the login's, and a ``password=`` parameter
    (libpq takes one in the query too)."""
    if not url.startswith(SCHEMES):
        return url
    url = re.sub(r"([?&]password=)[^&]*", r"\1***", url)
    scheme, rest = url.split("://", 1)
    auth, at, host = rest.rpartition("@")
    if not at or ":" not in auth:
        return url
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
