"""How git reads a repository URL: the scheme, login, host, port and path it will use, in
the canonical form the fleet's allow-list matches, or Refused when that reading could differ
from another's.

Two parsers read a URL a worker is given: git's own (connect.c, for ssh, git, file and
scp-like addresses) and curl's (for http and https). They disagree on edge cases that an
attacker can pick: curl ends the host at the first ``/``, ``?`` or ``#`` and takes the first
``@``; git ends it at the first ``/`` only; both decode ``%XX`` (in the host and login too);
curl reads ``127.1``, ``0x7f.0.0.1`` and ``2130706433`` as ``127.0.0.1`` and turns non-ASCII
host names into punycode. So a URL is accepted only in the shape every one of them reads the
same way, and everything else is refused with the reason, whatever a pattern says.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass

# Transports git runs without a remote helper program. `file` covers a local path too.
SCHEMES = ("https", "http", "ssh", "git", "file")
ALIASES = {"git+ssh": "ssh", "ssh+git": "ssh"}
MAX_LEN = 2000
# git's own rule (transport.c): scheme characters then "::" names the helper git-remote-<transport>.
_HELPER = re.compile(r"[A-Za-z0-9+.-]*::")
# git's test for a URL (url.c, is_url): scheme characters, the first a letter or digit, then "://".
_URL = re.compile(r"([A-Za-z0-9][A-Za-z0-9+.-]*)://([^/]*)(.*)\Z", re.S)
_LABEL = re.compile(r"[a-z0-9_][a-z0-9_-]*\Z")
_NUMBER = re.compile(r"(?:[0-9]+|0x[0-9a-f]*)\Z")
_OCTET = re.compile(r"(?:0|[1-9][0-9]{0,2})\Z")
_PORT = re.compile(r"[1-9][0-9]{0,4}\Z")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\Z")
# What an http(s) URL's user and password may hold (RFC 3986 userinfo, no escapes).
_CREDENTIALS = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:-]*\Z")


class Refused(ValueError):
    """A repository URL this worker never clones; the message is one line."""


@dataclass(frozen=True)
class RepoUrl:
    """A URL as git reads it. ``authority`` is ``[login@]host[:port]`` (an ssh login kept: it
    picks whose ~ a path is relative to; http credentials dropped: a token is not part of
    which repository it is); ``path`` is canonical (no repeated or trailing ``/``, no ``.git``);
    ``local`` is the path git opens for a file URL or absolute path."""

    scheme: str
    authority: str
    path: str
    local: str = ""

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"


def bad_char(text: str) -> bool:
    # Control characters, whitespace of any script, and invisible format characters
    # (bidi overrides would make a URL read differently from what is matched).
    return any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in text)


def tidy_path(path: str) -> str:
    path = re.sub(r"/{2,}", "/", path)
    path = path.rstrip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")].rstrip("/")
    return path


def _check_text(url: str) -> None:
    """The refusals that hold wherever in the URL the characters are."""
    if not isinstance(url, str) or not url:
        raise Refused("empty repository URL")
    if len(url) > MAX_LEN:
        raise Refused(f"repository URL longer than {MAX_LEN} characters")
    if url.startswith("-"):
        raise Refused("repository URL starts with '-' (git would read it as an option)")
    if _HELPER.match(url):
        raise Refused("a '<transport>::' URL runs a git remote helper program")
    if bad_char(url):
        raise Refused("repository URL contains a control character or whitespace")
    if "\\" in url:
        raise Refused("a backslash in a repository URL (some parsers read it as '/')")
    if "%" in url:
        # git and curl decode %XX in the host, the login and the path after the match.
        raise Refused("percent-encoding in a repository URL: write the characters themselves")
    if "?" in url or "#" in url:
        raise Refused(
            "'?' or '#' in a repository URL (curl ends the host there, git does not): "
            "give the URL without a query or fragment"
        )


def parse(url: str) -> RepoUrl:
    """``url`` as git will read it, canonical; Refused with the reason for a URL shape git
    would read differently from this, or run a program for."""
    _check_text(url)
    m = _URL.match(url)
    if m:
        # git compares schemes case-sensitively: `SSH://` would look for a helper git-remote-SSH.
        scheme, auth, path = ALIASES.get(m.group(1), m.group(1)), m.group(2), m.group(3)
        if scheme not in SCHEMES:
            raise Refused(f"scheme {scheme!r} needs a git remote helper: use https, ssh, git or file")
    elif url.startswith("/"):
        scheme, auth, path = "file", "", url
    else:
        scheme, auth, path = scp(url)
    if url.count("://") > (1 if m else 0):
        # git takes the first "://" anywhere as the end of a scheme (connect.c).
        raise Refused("'://' inside a repository URL")
    authority = _authority(scheme, auth)
    if any(seg in (".", "..") for seg in path.split("/")):
        raise Refused("a '.' or '..' path segment (it could leave the directory a pattern names)")
    canonical = tidy_path(path)
    if not canonical:
        raise Refused("names no repository path")
    # git opens a local path without its trailing slashes (enter_repo).
    local = (path.rstrip("/") or "/") if scheme == "file" else ""
    return RepoUrl(scheme, authority, canonical, local)


def scp(text: str) -> tuple[str, str, str]:
    """git's scp-like form, ``[user@]host:path`` (a colon before any slash), as ssh parts."""
    colon, slash = text.find(":"), text.find("/")
    if colon <= 0 or (slash != -1 and slash < colon):
        raise Refused("neither a URL nor an absolute path (git would resolve it against a directory)")
    auth, path = text[:colon], text[colon + 1 :]
    if "[" in auth or "]" in auth:
        # git unwraps [host:port] and [user@host] here: a port or login the form does not show.
        raise Refused("brackets in a scp-like address: write ssh://[user@]host[:port]/path")
    if auth in (*SCHEMES, *ALIASES):
        raise Refused(f"{auth}:… is read by git as the ssh host {auth!r}: write {auth}:// with two slashes")
    if not path.startswith("/"):
        # A relative scp path is relative to the login's home, as git reads it.
        path = "/" + (path if path.startswith("~") else "~/" + path)
    return "ssh", auth, path


def _authority(scheme: str, auth: str) -> str:
    """The canonical ``[login@]host[:port]``; Refused for a host git or curl could connect to
    other than the one this reads."""
    if scheme == "file":
        if auth:
            raise Refused("a file:// URL with a host: write file:///absolute/path")
        return ""
    if not auth.isascii():
        # curl turns a non-ASCII host into punycode; str.lower() maps some letters to ASCII.
        raise Refused("a non-ASCII host or login: write the host's xn-- (punycode) form")
    if auth.count("@") > 1:
        raise Refused("more than one '@' before the path (git and curl split it at different ones)")
    user, at, hostport = auth.rpartition("@")
    hostport = _hostport(hostport)
    if not at:
        return hostport
    if scheme == "git":
        raise Refused("a git:// URL takes no user name")
    if scheme == "ssh":
        if not _USER.match(user):
            raise Refused(
                "an ssh login must be a plain user name (letters, digits, '.', '_', '-'; no password)"
            )
        return f"{user}@{hostport}"
    if not _CREDENTIALS.match(user):
        raise Refused("characters in the URL's credentials that git or curl could read as part of the host")
    return hostport  # http(s) credentials are dropped: curl sends them to the host matched


def _hostport(text: str) -> str:
    """``host[:port]`` canonical: lower case, an IPv6 address compressed in brackets."""
    if text.startswith("["):
        end = text.find("]")
        try:
            host = f"[{ipaddress.IPv6Address(text[1:end]).compressed}]" if end > 0 else ""
        except ValueError:
            host = ""
        if not host:
            raise Refused("a bracketed host that is not an IPv6 address")
        port = text[end + 1 :]
    else:
        name, colon, port = text.partition(":")
        host, port = _host_name(name.lower()), colon + port
    if port and not (port.startswith(":") and _PORT.match(port[1:]) and int(port[1:]) <= 65535):
        raise Refused("the port is not a number from 1 to 65535 without leading zeros")
    return host + port


def _host_name(host: str) -> str:
    if not host:
        raise Refused("names no host")
    labels = host.split(".")
    if "" in labels:
        raise Refused(f"the host {host!r} has an empty label or a trailing '.'")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise Refused("the host is not a plain host name, IPv4 address or [IPv6] address")
    # curl and the resolver read 127.1, 0177.0.0.1, 0x7f.0.0.1 and 2130706433 as 127.0.0.1.
    quad = len(labels) == 4 and all(_OCTET.match(x) and int(x) <= 255 for x in labels)
    if _NUMBER.match(labels[-1]) and not quad:
        raise Refused(f"the numeric host {host!r} is not a dotted IPv4 address such as 192.0.2.1")
    return host
