"""Which repositories a worker may clone.

Whoever can write a row to a shared registry picks the URL a worker clones, so a worker
clones only what its ``--allow-repo`` patterns name, and some URL shapes are refused
whatever the patterns say (fleet/repourl.py): options in disguise, remote helpers that run
programs, and anything whose meaning to git or curl could differ from what a pattern was
matched against.

A URL is matched in a canonical form ``scheme://authority/path``: ``git@host:org/x`` is
``ssh://git@host/~/org/x`` (an scp-like path is relative to the login's home, as git reads
it), ``git+ssh`` is ``ssh``, the host is lower-cased (an IPv6 address compressed), credentials
of an http(s) URL are dropped, repeated slashes are one, and a trailing ``/`` and ``.git`` are
stripped. A local repository (``file:///path`` or ``/path``) is matched on the real path of the
directory git would open (fleet/localrepo.py), and git is given that directory. Patterns are
shell globs (case-sensitive) written in any of those forms and canonicalised the same way; a
pattern's scheme, authority and path are matched separately, so a ``*`` in the host never
reaches into the path (in the path ``*`` does cross ``/``).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from fnmatch import fnmatchcase

from loopwright.fleet import localrepo
from loopwright.fleet.repourl import SCHEMES, Refused, RepoUrl, bad_char, parse, scp, tidy_path

__all__ = ["SCHEMES", "Allow", "Refused", "git_url", "normalised", "refused"]

_URL_GLOB = re.compile(r"([^:/]+)://([^/]*)(.*)\Z", re.S)
_GLOB = re.compile(r"[*?[]")


def refused(url: str) -> str | None:
    """Why ``url`` is never cloned whatever the patterns (one line), or None. The shape
    alone: what a local path leads to is known only on the worker that clones it."""
    try:
        parse(url)
    except Refused as e:
        return str(e)
    return None


def normalised(url: str) -> str:
    """The canonical form patterns are matched against; Refused for a refused shape."""
    return str(parse(url))


def resolved(url: str) -> tuple[RepoUrl, str]:
    """(what is matched, what git is given) for ``url`` on this machine: a local repository's
    real directory, else the URL itself. Refused for a refused shape."""
    parts = parse(url)
    if parts.scheme != "file":
        return parts, url
    real = localrepo.real_git_dir(parts.local)
    try:
        return parse(real), real
    except Refused as e:
        raise Refused(f"the real path of {parts.local}, {real}: {e}") from None


def git_url(url: str) -> str:
    """What git is given for ``url`` (see resolved); Refused for a refused shape."""
    return resolved(url)[1]


def _pattern_authority(scheme: str, auth: str) -> str:
    """A pattern's authority as matched: http(s) and git credentials dropped, an ssh login
    kept, the host lower-cased; an [IPv6] host is a literal, not a character class."""
    if scheme == "file":
        return auth.lower()
    user, at, host = auth.rpartition("@")
    host = host.lower()
    if host.startswith("[") and "]" in host:
        inside, _, port = host[1:].partition("]")
        try:
            host = f"[[]{ipaddress.IPv6Address(inside).compressed}[]]{port}"
        except ValueError:
            pass  # a glob of its own
    if scheme != "ssh" or not at:
        return host
    return f"{user.split(':', 1)[0]}@{host}"


def _real_prefix(path: str) -> str:
    """A local pattern with the directory before its first glob character resolved, as the
    URLs it is matched against are (a pattern under a symlinked directory still matches)."""
    glob = _GLOB.search(path)
    head = path[: glob.start()] if glob else path
    base = head.rsplit("/", 1)[0]
    if not base or not os.path.isdir(base):
        return path
    return os.path.realpath(base) + path[len(base) :]


def _pattern(text: str) -> tuple[str, str, str] | None:
    """(scheme, authority, path) globs of a pattern, canonical; None for a glob over the whole
    canonical URL (``*``)."""
    m = _URL_GLOB.match(text)
    if m:
        scheme, auth, path = m.group(1).lower(), m.group(2), m.group(3)
        scheme = {"git+ssh": "ssh", "ssh+git": "ssh"}.get(scheme, scheme)
    elif text.startswith("/"):
        scheme, auth, path = "file", "", text
    else:
        try:
            scheme, auth, path = scp(text)
        except Refused:
            return None
    if scheme == "file" and not auth:
        path = _real_prefix(path)
    path = tidy_path(path)
    if not path:
        raise Refused("names no repository path: end it with /*")
    return scheme, _pattern_authority(scheme, auth), path


class Allow:
    """A worker's allow-list: ``Allow(["https://github.com/acme/*"])("https://github.com/acme/x.git")``.
    No pattern allows nothing. A pattern that names no repository path raises ValueError."""

    def __init__(self, patterns: Iterable[str]):
        self.patterns = [p for p in patterns]
        self._compiled: list[tuple[str, tuple[str, str, str] | None]] = []
        for pattern in self.patterns:
            if not pattern or bad_char(pattern):
                raise ValueError(f"empty --allow-repo pattern or one with whitespace: {pattern!r}")
            try:
                self._compiled.append((pattern, _pattern(pattern)))
            except Refused as e:
                raise ValueError(f"--allow-repo {pattern}: {e}") from None

    def _matches(self, parts: RepoUrl) -> bool:
        whole = str(parts)
        have = (parts.scheme, parts.authority, parts.path)
        for raw, glob in self._compiled:
            if glob is None and fnmatchcase(whole, raw):
                return True
            if glob is not None and all(fnmatchcase(h, w) for h, w in zip(have, glob)):
                return True
        return False

    def resolve(self, url: str) -> str:
        """What git is given for ``url`` (a local repository's real directory, else the URL);
        Refused with the reason when this worker does not clone it."""
        if not self._compiled:
            parse(url)  # a refused shape says so first
            raise Refused("this worker allows no repository: start it with --allow-repo PATTERN")
        parts, given = resolved(url)
        if not self._matches(parts):
            real = f" (where {url} leads)" if parts.scheme == "file" and str(parts) != normalised(url) else ""
            raise Refused(f"no --allow-repo pattern matches {parts}{real}")
        return given

    def why_not(self, url: str) -> str | None:
        """None when ``url`` may be cloned, else the reason in one line."""
        try:
            self.resolve(url)
        except Refused as e:
            return str(e)
        return None

    def __call__(self, url: str) -> bool:
        return self.why_not(url) is None
