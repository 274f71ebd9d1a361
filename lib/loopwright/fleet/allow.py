"""Which repositories a worker may clone.

Whoever can write a row to a shared registry picks the URL a worker clones, so a worker
clones only what its ``--allow-repo`` patterns name, and some URL shapes are refused
whatever the patterns say: options in disguise, remote helpers that run programs, and
anything whose meaning to git could differ from what a pattern was matched against.

A URL is matched in a canonical form ``scheme://authority/path``: ``git@host:org/x`` is
``ssh://git@host/~/org/x`` (an scp-like path is relative to the login's home, as git reads
it), an absolute path is ``file:///path``, ``git+ssh`` is ``ssh``, the scheme and host are
lower-cased, credentials of an http(s) URL are dropped, repeated slashes are one, and a
trailing ``/`` and ``.git`` are stripped. Patterns are shell globs (case-sensitive) written
in any of those forms and canonicalised the same way; a pattern's scheme, authority and
path are matched separately, so a ``*`` in the host never reaches into the path (in the
path ``*`` does cross ``/``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from fnmatch import fnmatchcase

# Transports git runs without a remote helper program. `file` covers a local path too.
SCHEMES = ("https", "http", "ssh", "git", "file")
ALIASES = {"git+ssh": "ssh", "ssh+git": "ssh"}
MAX_LEN = 2000
# git's own rule (transport.c): scheme characters then "::" names the helper git-remote-<transport>.
_HELPER = re.compile(r"[A-Za-z0-9+.-]*::")
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)(.*)\Z", re.S)
_URL_GLOB = re.compile(r"([^:/]+)://([^/]*)(.*)\Z", re.S)
_HOST = re.compile(r"(?:[a-z0-9_][a-z0-9._-]*|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?\Z")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\Z")


class Refused(ValueError):
    """A repository URL this worker never clones; the message is one line."""


def _bad_char(text: str) -> bool:
    # Control characters, whitespace of any script, and invisible format characters
    # (bidi overrides would make a URL read differently from what is matched).
    return any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in text)


def _tidy_path(path: str) -> str:
    path = re.sub(r"/{2,}", "/", path)
    path = path.rstrip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")].rstrip("/")
    return path


def _authority(scheme: str, auth: str, glob: bool) -> str:
    """The authority as matched: http(s) and git credentials dropped (a token is not part of
    which repository it is), an ssh login kept (it picks whose ~ a path is relative to)."""
    user, at, host = auth.rpartition("@")
    host = host.lower()
    if scheme == "file":
        if auth and not glob:
            raise Refused("a file:// URL with a host: write file:///absolute/path")
        return host
    if not glob and not _HOST.match(host):
        raise Refused("the host is not a plain host name, IP address or [IPv6] with an optional port")
    if scheme != "ssh" or not at:
        return host
    user = user.split(":", 1)[0]
    if not glob and not _USER.match(user):
        raise Refused("the ssh login name has characters other than letters, digits, '.', '_' and '-'")
    return f"{user}@{host}"


def _scp(text: str) -> tuple[str, str, str] | None:
    """git's scp-like form, ``[user@]host:path``: a colon before any slash."""
    colon, slash = text.find(":"), text.find("/")
    if colon <= 0 or (slash != -1 and slash < colon):
        return None
    auth, path = text[:colon], text[colon + 1 :]
    if not path.startswith("/"):
        path = "/" + (path if path.startswith("~") else "~/" + path)
    return "ssh", auth, path


def _parts(text: str, glob: bool) -> tuple[str, str, str] | None:
    """(scheme, authority, path) of a URL or pattern, canonical; None for a pattern that is a
    glob over the whole canonical URL (``*``). Refused for a URL shape git would read
    differently or run a program for."""
    m = (_URL_GLOB if glob else _URL).match(text)
    if m:
        # git compares schemes case-sensitively: `SSH://` would look for a helper git-remote-SSH.
        scheme, auth, path = m.group(1).lower() if glob else m.group(1), m.group(2), m.group(3)
        scheme = ALIASES.get(scheme, scheme)
        if scheme not in SCHEMES and not glob:
            raise Refused(f"scheme {scheme!r} needs a git remote helper: use https, ssh, git or file")
    elif text.startswith("/"):
        scheme, auth, path = "file", "", text
    elif _scp(text) is not None:
        scheme, auth, path = _scp(text)
    elif glob:
        return None
    else:
        raise Refused("neither a URL nor an absolute path (git would resolve it against a directory)")
    auth = _authority(scheme, auth, glob)
    if not glob:
        _check_path(path)
    path = _tidy_path(path)
    if not path:
        raise Refused("names no repository path" if not glob else "names no repository path: end it with /*")
    return scheme, auth, path


def _check_path(path: str) -> None:
    if "%" in path:
        # git decodes %XX in URLs: %2e%2e would be '..' after the pattern was matched.
        raise Refused("percent-encoding in the path: write the characters themselves")
    if "\\" in path:
        raise Refused("a backslash in the path")
    if any(seg in (".", "..") for seg in path.split("/")):
        raise Refused("a '.' or '..' path segment (it could leave the directory a pattern names)")


def _shape(url: str) -> tuple[str, str, str]:
    """The canonical parts of ``url``, or Refused with the reason whatever the patterns."""
    if not isinstance(url, str) or not url:
        raise Refused("empty repository URL")
    if len(url) > MAX_LEN:
        raise Refused(f"repository URL longer than {MAX_LEN} characters")
    if url.startswith("-"):
        raise Refused("repository URL starts with '-' (git would read it as an option)")
    if _HELPER.match(url):
        raise Refused("a '<transport>::' URL runs a git remote helper program")
    if _bad_char(url):
        raise Refused("repository URL contains a control character or whitespace")
    parts = _parts(url, glob=False)
    if parts is None:  # only a pattern can be a bare glob
        raise Refused("neither a URL nor an absolute path")
    return parts


def _joined(parts: tuple[str, str, str]) -> str:
    return f"{parts[0]}://{parts[1]}{parts[2]}"


def refused(url: str) -> str | None:
    """Why ``url`` is never cloned whatever the patterns (one line), or None."""
    try:
        _shape(url)
    except Refused as e:
        return str(e)
    return None


def normalised(url: str) -> str:
    """The canonical form patterns are matched against; Refused for a refused shape."""
    return _joined(_shape(url))


class Allow:
    """A worker's allow-list: ``Allow(["https://github.com/acme/*"])("https://github.com/acme/x.git")``.
    No pattern allows nothing. A pattern that names no repository path raises ValueError."""

    def __init__(self, patterns: Iterable[str]):
        self.patterns = [p for p in patterns]
        self._compiled: list[tuple[str, tuple[str, str, str] | None]] = []
        for pattern in self.patterns:
            if not pattern or _bad_char(pattern):
                raise ValueError(f"empty --allow-repo pattern or one with whitespace: {pattern!r}")
            try:
                self._compiled.append((pattern, _parts(pattern, glob=True)))
            except Refused as e:
                raise ValueError(f"--allow-repo {pattern}: {e}") from None

    def why_not(self, url: str) -> str | None:
        """None when ``url`` may be cloned, else the reason in one line."""
        try:
            parts = _shape(url)
        except Refused as e:
            return str(e)
        if not self._compiled:
            return "this worker allows no repository: start it with --allow-repo PATTERN"
        whole = _joined(parts)
        for raw, glob in self._compiled:
            if glob is None and fnmatchcase(whole, raw):
                return None
            if glob is not None and all(fnmatchcase(have, want) for have, want in zip(parts, glob)):
                return None
        return f"no --allow-repo pattern matches {whole}"

    def __call__(self, url: str) -> bool:
        return self.why_not(url) is None
