"""Hostile repository URLs (issue 26), one table for every place a URL is checked: `submit`,
`POST /api/loops`, a worker's claim and the workspace's git commands.

Each URL disguises a host it would really reach as one an allow-list names. ``{port}`` is a
listener of the URL's own on 127.0.0.1 (a connection to it is the attack working), ``{redirect}``
an allowed local HTTP server that answers 302 to a listener, ``{allowed}`` the directory a
file pattern allows and ``{outside}`` a repository outside it. ``shape``: refused by its shape
alone (by submit, the API and every worker); the others are refused by the worker's
allow-list, once it reads them as git will (or, for a redirect, by git not following it)."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

# A worker's allow-list for the table: what a team would allow, and the local redirecting server.
ALLOW = [
    "https://github.com/acme/*",
    "http://github.com/acme/*",
    "ssh://*@github.com/acme/*",
    "git@github.com:acme/*",
    "git://github.com/acme/*",
    "file://{allowed}/*",
    "http://127.0.0.1:{redirect}/*",
]


@dataclass(frozen=True)
class Hostile:
    url: str
    shape: bool
    says: str = ""  # a word the refusal holds


TABLE = [
    # The three: curl ends the host at the first '?' or '#'. (First: a worker that
    # accepts one clones it at once, and the test sees its listener reached.)
    Hostile("https://127.0.0.1:{port}#@github.com/acme/x", True, "'?' or '#'"),
    Hostile("http://127.0.0.1:{port}/?@github.com/acme/x", True, "'?' or '#'"),
    Hostile("https://evil.example?@github.com/acme/x", True, "'?' or '#'"),
    Hostile("https://127.0.0.1:{port}?@github.com/acme/x", True, "'?' or '#'"),
    Hostile("http://127.0.0.1:{port}/#@github.com/acme/x", True, "'?' or '#'"),
    Hostile("https://github.com/acme/x?@127.0.0.1:{port}", True, "'?' or '#'"),
    Hostile("git://127.0.0.1:{port}?@github.com/acme/x", True, "'?' or '#'"),
    Hostile("ssh://git@127.0.0.1:{port}#@github.com/acme/x", True, "'?' or '#'"),
    Hostile("git+ssh://127.0.0.1:{port}#@github.com/acme/x", True, "'?' or '#'"),
    # Userinfo: two '@', a password on ssh, a login on git://, credentials hiding the host.
    Hostile("http://github.com@127.0.0.1:{port}@github.com/acme/x", True, "more than one '@'"),
    Hostile("https://u:p@127.0.0.1:{port}@github.com/acme/x", True, "more than one '@'"),
    Hostile("ssh://git:secret@github.com/acme/x", True, "plain user name"),
    Hostile("ssh://-oProxyCommand=nc@github.com/acme/x", True, "plain user name"),
    Hostile("git://git@github.com/acme/x", True, "no user name"),
    Hostile("https://github.com:443@127.0.0.1:{port}/acme/x", False),
    Hostile("http://127.0.0.1:{port}/github.com/acme/x", False),
    # Backslashes and whitespace inside the authority.
    Hostile("http://127.0.0.1:{port}\\@github.com/acme/x", True, "backslash"),
    Hostile("http://127.0.0.1:{port}\t@github.com/acme/x", True, "whitespace"),
    Hostile("http://127.0.0.1:{port}\n@github.com/acme/x", True, "whitespace"),
    # Percent-encoding: git and curl decode it in the host, the login and the path.
    Hostile("http://%31%32%37.0.0.1:{port}/acme/x", True, "percent-encoding"),
    Hostile("ssh://git%40127.0.0.1@github.com/acme/x", True, "percent-encoding"),
    Hostile("https://github.com/acme/%2e%2e/%2e%2e/x", True, "percent-encoding"),
    # IPv4 in the forms curl and the resolver read as 127.0.0.1; IPv6 literals.
    Hostile("http://127.1:{port}/acme/x", True, "numeric host"),
    Hostile("http://2130706433:{port}/acme/x", True, "numeric host"),
    Hostile("http://0x7f.0.0.1:{port}/acme/x", True, "numeric host"),
    Hostile("http://0177.0.0.1:{port}/acme/x", True, "numeric host"),
    Hostile("http://[::ffff:127.0.0.1]:{port}/acme/x", False),
    Hostile("http://[::ffff:127.0.0.1%25lo]:{port}/acme/x", True, "percent-encoding"),
    Hostile("http://[127.0.0.1]:{port}/acme/x", True, "IPv6"),
    # Ports, case, trailing dots, non-ASCII hosts.
    Hostile("https://github.com:/acme/x", True, "port"),
    Hostile("https://github.com:0/acme/x", True, "port"),
    Hostile("https://github.com:65536/acme/x", True, "port"),
    Hostile("https://github.com:0443/acme/x", True, "port"),
    Hostile("HTTPS://github.com/acme/x", True, "remote helper"),
    Hostile("https://github.com./acme/x", True, "trailing '.'"),
    Hostile("https://gith\u00fcb.com/acme/x", True, "non-ASCII"),
    # scp-like addresses git unwraps, and '://' where git would read a scheme.
    Hostile("[127.0.0.1:{port}]:acme/x", True, "brackets"),
    Hostile("git@[127.0.0.1:{port}]:acme/x", True, "brackets"),
    Hostile("git@127.0.0.1:acme/x", False),
    Hostile("https://github.com/acme/x/http://127.0.0.1:{port}/y", True, "'://'"),
    # Programs and options.
    Hostile("ext::sh -c nc 127.0.0.1 {port}", True, "remote helper"),
    Hostile("--upload-pack=nc 127.0.0.1 {port}", True, "starts with '-'"),
    Hostile("fd::7", True, "remote helper"),
    # Local paths: a host, dot segments, a scheme without '//', symlinks and .git files out.
    Hostile("file://localhost{allowed}/repo.git", True, "file:// URL with a host"),
    Hostile("file://{allowed}/../outside/repo.git", True, "'..'"),
    Hostile("file:{allowed}/repo.git", True, "two slashes"),
    Hostile("file://{allowed}/link.git", False),
    Hostile("{allowed}/link", False),
    Hostile("{allowed}/gitfile.git", False),
    # An allowed host that answers 302 to another.
    Hostile("http://127.0.0.1:{redirect}/acme/x", False),
]


def render(url: str, port: int = 9, redirect: int = 9, allowed: str = "/srv/allowed") -> str:
    return url.replace("{port}", str(port)).replace("{redirect}", str(redirect)).replace("{allowed}", allowed)


class Listener:
    """A TCP socket on 127.0.0.1 that counts the connections it is given."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


class Redirector:
    """A local HTTP server that answers every request with a 302 to ``target``'s port."""

    def __init__(self, target: int) -> None:
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.requests += 1
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{target}{self.path}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *args) -> None:
                pass

        self.requests = 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True, timeout=60)
    return path


class Scene:
    """The table's URLs made real: a listener for each, the redirecting server, the allowed
    directory with its symlinks and .git file leading to a repository outside it."""

    def __init__(self, tmp: Path) -> None:
        self.allowed, outside = tmp / "allowed", tmp / "outside"
        self.allowed.mkdir()
        outside.mkdir()
        self.outside = bare(outside / "repo.git")
        bare(self.allowed / "repo.git")
        (self.allowed / "link.git").symlink_to(self.outside)
        (self.allowed / "gitfile.git").write_text(f"gitdir: {self.outside}\n")
        self.listeners = {h.url: Listener() for h in TABLE}
        self.target = Listener()  # where the redirect points
        self.redirector = Redirector(self.target.port)
        self.urls = {h.url: self.render(h.url, self.listeners[h.url].port) for h in TABLE}

    def render(self, url: str, port: int = 9) -> str:
        return render(url, port, self.redirector.port, str(self.allowed))

    @property
    def allow(self) -> list[str]:
        return [self.render(p) for p in ALLOW]

    def connected(self) -> dict[str, int]:
        """The URLs whose disguised host was connected to (the redirect's target included)."""
        seen = {self.urls[u]: lis.connections for u, lis in self.listeners.items() if lis.connections}
        if self.target.connections:
            seen["the redirect's target"] = self.target.connections
        return seen

    def close(self) -> None:
        for lis in [*self.listeners.values(), self.target]:
            lis.close()
        self.redirector.close()
