"""GitHub through the real ``gh`` CLI, for the modes that work on GitHub (work, review).

loopwright talks REST through ``gh api``: gh keeps the user's login, host and TLS
settings, and the same calls work against github.com and GitHub Enterprise. Every
value that reaches a URL is checked first (repository slug, host, numbers) or
percent-encoded (labels, logins); nothing goes through a shell.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from urllib.parse import quote

from loopwright.core.errors import LoopError

DEFAULT_HOST = "github.com"
TIMEOUT = 30.0  # seconds for one gh call: six of them stay well inside the Stop hook's 900 s
SLUG_RE = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
HOST_RE = re.compile(r"^[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$")
REMOTE_RES = (
    re.compile(r"^(?:https?|ssh|git)://(?:[^@/]+@)?([^/]+)/([^/]+/[^/]+?)(?:\.git)?/?$"),
    re.compile(r"^(?:[^@/]+@)?([^:/]+):([^/]+/[^/]+?)(?:\.git)?/?$"),  # git@host:owner/name
)


class GhError(LoopError):
    """gh is missing, not logged in, or a call failed: one line that says which and what to do."""


class Repo:
    """One GitHub repository: its host and ``owner/name``."""

    __slots__ = ("host", "slug")

    def __init__(self, host: str, slug: str):
        if not HOST_RE.match(host or ""):
            raise GhError(f"{host!r} is not a GitHub host name")
        if not SLUG_RE.match(slug or "") or ".." in slug:
            raise GhError(f"{slug!r} is not a repository; give it as OWNER/NAME")
        self.host, self.slug = host, slug

    def to_dict(self) -> dict:
        return {"host": self.host, "slug": self.slug}

    @classmethod
    def from_dict(cls, data: dict) -> Repo:
        return cls(str(data.get("host") or DEFAULT_HOST), str(data.get("slug") or ""))

    def path(self, rest: str) -> str:
        return f"repos/{self.slug}/{rest}"


def resolve_repo(project: str, given: str | None) -> Repo:
    """``--repo [HOST/]OWNER/NAME``, else the project's ``origin`` remote."""
    if given:
        parts = given.strip().split("/")
        if len(parts) == 3:
            return Repo(parts[0], "/".join(parts[1:]))
        return Repo(os.environ.get("GH_HOST") or DEFAULT_HOST, given.strip())
    try:
        url = subprocess.run(
            ["git", "-C", project, "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        url = ""
    for pattern in REMOTE_RES:
        m = pattern.match(url)
        if m:
            return _trusted_host(Repo(m.group(1), m.group(2)))
    raise GhError(
        "cannot tell which GitHub repository this project is: it has no GitHub `origin` remote; "
        "give one with --repo OWNER/NAME"
    )


def _trusted_host(repo: Repo) -> Repo:
    """A remote may come from a cloned repository: gh would send a GitHub Enterprise token to
    whatever host it names. Only github.com and the user's own $GH_HOST are taken from it."""
    if repo.host in (DEFAULT_HOST, os.environ.get("GH_HOST")):
        return repo
    raise GhError(
        f"the origin remote points at {repo.host}, which is not github.com or $GH_HOST; if that is your "
        f"GitHub Enterprise host, say so with --repo {repo.host}/{repo.slug}"
    )


class Gh:
    """``gh api`` calls against one repository's host."""

    def __init__(self, repo: Repo, binary: str | None = None, timeout: float = TIMEOUT):
        self.repo, self.timeout = repo, timeout
        self.binary = binary or os.environ.get("LOOPWRIGHT_GH") or "gh"

    def _env(self) -> dict:
        env = dict(os.environ, GH_PROMPT_DISABLED="1", GH_NO_UPDATE_NOTIFIER="1", NO_COLOR="1")
        if self.repo.host != DEFAULT_HOST:
            env["GH_HOST"] = self.repo.host  # `--hostname` refuses a host with a port
        else:
            env.pop("GH_HOST", None)
        return env

    def api(self, path: str, method: str = "GET", fields: dict | None = None, paginate: bool = False):
        """One REST call; the parsed JSON answer (a list for a paginated list)."""
        args = [self.binary, "api", "-X", method, path]
        if paginate:
            args.append("--paginate")
        body = None
        if fields:
            args += ["--input", "-"]
            body = json.dumps(fields)
        try:
            out = subprocess.run(
                args, input=body, capture_output=True, text=True, timeout=self.timeout, env=self._env()
            )
        except FileNotFoundError:
            raise GhError(
                f"the GitHub CLI `{self.binary}` is not installed or not on PATH; install it "
                "(Debian/Ubuntu: apt install gh; elsewhere https://cli.github.com)"
            ) from None
        except subprocess.TimeoutExpired:
            raise GhError(
                f"gh api {path} gave no answer in {self.timeout:g} s; is {self.repo.host} up?"
            ) from None
        if out.returncode != 0:
            raise GhError(self._failure(path, out.stderr or out.stdout))
        return _parse(out.stdout, paginate)

    def _failure(self, path: str, text: str) -> str:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no error text")
        low = text.lower()
        if "gh auth login" in low or "http 401" in low or "bad credentials" in low:
            return (
                f"gh is not logged in to {self.repo.host}; run `gh auth login --hostname {self.repo.host}` "
                "(or set GH_TOKEN, GH_ENTERPRISE_TOKEN for a GitHub Enterprise host)"
            )
        return f"gh api {path} failed: {first[:300]}"

    def login(self) -> str:
        """The login gh acts as: proves gh is installed and logged in."""
        user = self.api("user")
        if not isinstance(user, dict) or not isinstance(user.get("login"), str):
            raise GhError(f"gh api user gave no login on {self.repo.host}")
        return user["login"]


def together(*calls):
    """The gh calls run side by side (each is a process and a round trip); their answers in
    order, or the first GhError."""
    import threading

    out: list = [None] * len(calls)

    def one(i: int) -> None:
        try:
            out[i] = calls[i]()
        except GhError as exc:
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for value in out:
        if isinstance(value, GhError):
            raise value
    return out


def _parse(text: str, paginate: bool):
    """gh prints one JSON document, or with --paginate one per page (lists to join)."""
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        if not paginate:
            raise GhError("gh api gave an answer that is not JSON") from None
    items: list = []
    decoder, i = json.JSONDecoder(), 0
    while i < len(text):
        try:
            page, i = decoder.raw_decode(text, i)
        except ValueError:
            raise GhError("gh api gave an answer that is not JSON") from None
        items += page if isinstance(page, list) else [page]
        while i < len(text) and text[i].isspace():
            i += 1
    return items


def q(value: str) -> str:
    """A value for a query string."""
    return quote(str(value), safe="")


def number(value: object, what: str = "number") -> int:
    """A positive issue or pull request number from user text such as ``142`` or ``#142``."""
    text = str(value).strip().lstrip("#")
    if not text.isdigit() or not 0 < int(text) < 10**9:
        raise GhError(f"{what} must be a positive number such as 142, got {value!r}")
    return int(text)
