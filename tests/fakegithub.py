"""A fake GitHub REST API over HTTPS, for driving the real ``gh`` CLI offline.

``gh`` treats any host but github.com as GitHub Enterprise and sends REST calls to
``https://HOST/api/v3/…``. This server answers the calls loopwright and its tests
make (issues, pull requests, reviews, comments, checks, merges) from an in-memory
repository, with a certificate made for the run (``openssl``) that ``gh`` is told to
trust through ``SSL_CERT_FILE``. ``env()`` gives the variables a process needs so its
``gh`` talks to this server as the logged-in user.

Every list is served in pages as GitHub does: ``per_page`` (default 30, at most 100) and
``page``, with a ``Link`` header naming the ``next``/``last`` (and ``first``/``prev``)
pages, so ``gh api --paginate`` walks them. Issues carry GitHub's
``sub_issues_summary`` and ``issue_dependencies_summary`` and answer the sub-issues and
issue-dependencies endpoints (``FakeGitHub(dependencies=False)`` plays a GitHub
Enterprise server without them: no summaries, and those endpoints 404).

Tests change the repository directly (``add_issue``, ``push``, ``set_checks``,
``comment``, ``review``, ``add_sub_issue``, ``block``, ``close``) to play the humans and CI around the loop.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

TOKEN = "fake-gh-token"
LOGIN = "loop-bot"
PER_PAGE, MAX_PER_PAGE = 30, 100  # GitHub's REST defaults


def make_certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        # An elliptic-curve key: made in milliseconds, where an RSA key took a third of a second.
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
        + ["-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-days", "2"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


class Repo:
    """One repository's issues and pull requests (they share numbers, as on GitHub)."""

    def __init__(self, slug: str):
        self.slug = slug
        self.numbers = itertools.count(1)
        self.ids = itertools.count(1000)
        self.issues: dict[int, dict] = {}
        self.pulls: dict[int, dict] = {}
        self.commits: dict[int, list[dict]] = {}
        self.checks: dict[str, list[dict]] = {}
        self.reviews: dict[int, list[dict]] = {}
        self.review_comments: dict[int, list[dict]] = {}
        self.comments: dict[int, list[dict]] = {}
        self.sub_issues: dict[int, list[int]] = {}  # parent -> its sub-issues, in the order added
        self.blocked_by: dict[int, list[int]] = {}  # issue -> the issues it is blocked by
        self.milestones = [{"number": 1, "title": "v1", "state": "open"}]
        self.last_at = 0.0

    def now(self) -> str:
        # Strictly increasing whole seconds, so "before"/"after" never tie.
        self.last_at = max(time.time(), self.last_at + 1.0)
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.last_at))


# This fake serves from a thread of the test process. On a saturated machine that thread can
# miss gh's fixed 10 s TLS handshake limit (seen beside two CPU burners and the rest of the
# suite), which real GitHub never does; the `gh` on the tests' PATH tries such a call again,
# at most twice. Any other failure is passed on as it is. A shell script, not Python: the
# suite runs gh some 800 times, and an interpreter's start for each cost more than gh itself.
SHIM = """#!/bin/sh
real={real}
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
# Only `--input -` reads stdin (a request body): read it once, to send it again.
body=/dev/null
prev=
for arg in "$@"; do
  if [ "$arg" = "--input=-" ] || {{ [ "$prev" = "--input" ] && [ "$arg" = "-" ]; }}; then
    body=$dir/body
    cat >"$body"
    break
  fi
  prev=$arg
done
for attempt in 1 2 3; do
  "$real" "$@" <"$body" >"$dir/out" 2>"$dir/err"
  code=$?
  grep -q "TLS handshake timeout" "$dir/err" || break
done
cat "$dir/out"
cat "$dir/err" >&2
exit "$code"
"""


def _gh_shim(workdir: Path) -> Path:
    """A directory holding the retrying `gh` (see SHIM), for the front of PATH."""
    real = shutil.which("gh")
    shim_dir = workdir / "gh-shim"
    shim_dir.mkdir(exist_ok=True)
    if real:
        shim = shim_dir / "gh"
        shim.write_text(SHIM.format(real=shlex.quote(real)))
        shim.chmod(0o755)
    return shim_dir


class _TLSServer(ThreadingHTTPServer):
    """HTTPS whose TLS handshake happens in the request's own thread. Wrapping the listening
    socket instead makes accept() shake hands in the serving thread, where one client that
    connects and never speaks (a gh killed mid-connect) blocks the server, and shutdown, for good."""

    def __init__(self, address, handler, context: ssl.SSLContext):
        self.context = context
        super().__init__(address, handler)

    def finish_request(self, request, client_address) -> None:
        request.settimeout(120)  # a bound on a silent client; gh answers in milliseconds
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            tls.close()


class FakeGitHub:
    def __init__(self, workdir: Path, slug: str = "acme/widgets", dependencies: bool = True):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.repo = Repo(slug)
        self.dependencies = dependencies  # sub-issues and issue dependencies (GitHub.com has them)
        self.lock = threading.RLock()
        self.requests: list[tuple[str, str]] = []
        self.cert, self.key = make_certificate(self.workdir)
        self.config_dir = self.workdir / "gh-config"
        self.config_dir.mkdir(exist_ok=True)
        self.shim_dir = _gh_shim(self.workdir)

    # -- server -----------------------------------------------------------------------------

    def __enter__(self) -> FakeGitHub:
        handler = type("Handler", (_Handler,), {"gh": self})
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(self.key))
        self.server = _TLSServer(("127.0.0.1", 0), handler, ctx)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def host(self) -> str:
        return f"localhost:{self.server.server_address[1]}"

    @property
    def remote(self) -> str:
        return f"https://{self.host}/{self.repo.slug}.git"

    def env(self, logged_in: bool = True) -> dict[str, str]:
        env = {
            "PATH": f"{self.shim_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "GH_HOST": self.host,
            "GH_CONFIG_DIR": str(self.config_dir),
            "SSL_CERT_FILE": str(self.cert),
            "GH_PROMPT_DISABLED": "1",
            "GH_NO_UPDATE_NOTIFIER": "1",
        }
        if logged_in:
            env["GH_ENTERPRISE_TOKEN"] = TOKEN
        return env

    # -- the repository, as tests change it ----------------------------------------------------

    def add_issue(
        self, title: str, body: str = "", labels=(), assignees=(), milestone: int | None = None
    ) -> int:
        with self.lock:
            r = self.repo
            n = next(r.numbers)
            r.issues[n] = {
                "id": next(r.ids),
                "number": n,
                "title": title,
                "body": body,
                "state": "open",
                "labels": [{"name": x} for x in labels],
                "assignees": [{"login": x} for x in assignees],
                "milestone": {"number": milestone} if milestone else None,
                "html_url": f"https://{self.host}/{r.slug}/issues/{n}",
                "repository_url": f"https://{self.host}/api/v3/repos/{r.slug}",
                "user": {"login": "alice"},
                "created_at": r.now(),
            }
            return n

    def add_sub_issue(self, parent: int, child: int) -> None:
        with self.lock:
            self.repo.sub_issues.setdefault(parent, []).append(child)

    def block(self, issue: int, blocker: int) -> None:
        """``issue`` is blocked by ``blocker`` (GitHub's issue dependencies)."""
        with self.lock:
            self.repo.blocked_by.setdefault(issue, []).append(blocker)

    def close(self, issue: int) -> None:
        with self.lock:
            self.repo.issues[issue]["state"] = "closed"

    def open_pull(self, title: str, head: str, body: str = "", author: str = "carol") -> int:
        with self.lock:
            r = self.repo
            n = next(r.numbers)
            r.pulls[n] = {
                "number": n,
                "title": title,
                "body": body,
                "state": "open",
                "merged": False,
                "merged_at": None,
                "head": {"ref": head, "sha": ""},
                "base": {"ref": "main"},
                "labels": [],
                "user": {"login": author},
                "html_url": f"https://{self.host}/{r.slug}/pull/{n}",
            }
            r.commits[n], r.reviews[n], r.review_comments[n], r.comments[n] = [], [], [], []
            self.push(n, author)
            return n

    def push(self, pr: int, author: str = "carol") -> str:
        """A new commit on the PR's branch: a new head SHA."""
        with self.lock:
            r = self.repo
            sha = hashlib.sha1(str(next(r.ids)).encode()).hexdigest()
            r.commits[pr].append(
                {"sha": sha, "commit": {"committer": {"date": r.now()}, "author": {"name": author}}}
            )
            r.pulls[pr]["head"]["sha"] = sha
            r.checks.setdefault(sha, [])
            return sha

    def set_checks(self, pr: int, status: str = "completed", conclusion: str | None = "success") -> None:
        with self.lock:
            sha = self.repo.pulls[pr]["head"]["sha"]
            self.repo.checks[sha] = [{"name": "ci", "status": status, "conclusion": conclusion}]

    def comment(self, number: int, body: str, login: str = "alice") -> None:
        with self.lock:
            self.repo.comments.setdefault(number, []).append(self._said(login, body))

    def review(self, pr: int, state: str, body: str = "", login: str = "alice") -> None:
        with self.lock:
            entry = dict(self._said(login, body), state=state)
            entry["submitted_at"] = entry.pop("created_at")
            self.repo.reviews[pr].append(entry)

    def _said(self, login: str, body: str) -> dict:
        return {
            "id": next(self.repo.ids),
            "user": {"login": login},
            "body": body,
            "created_at": self.repo.now(),
        }

    def pull(self, n: int) -> dict:
        with self.lock:
            return json.loads(json.dumps(self.repo.pulls[n]))


class _Handler(BaseHTTPRequestHandler):
    gh: FakeGitHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, payload, link: str = "") -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if link:
            self.send_header("Link", link)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        if not n:
            return {}
        try:
            return json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return {}

    def _handle(self, method: str) -> None:
        body = self._body() if method in ("POST", "PUT", "PATCH") else {}
        url = urlsplit(self.path)
        self.gh.requests.append((method, self.path))  # with its query string
        if self.headers.get("Authorization") != f"token {TOKEN}":
            return self._send(401, {"message": "Bad credentials"})
        path = url.path.removeprefix("/api/v3")
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        with self.gh.lock:
            status, payload = _route(self.gh, method, path, query, body)
            payload = json.loads(json.dumps(payload))  # a copy: later changes do not reach this answer
        link = ""
        if method == "GET" and status == 200:
            payload, link = _page(f"https://{self.gh.host}{url.path}", query, payload)
        self._send(status, payload, link)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")


NOT_FOUND = (404, {"message": "Not Found"})


def _page(base: str, query: dict, payload):
    """One page of a list answer (a list, or check runs in their wrapper) and its Link header."""
    items = payload.get("check_runs") if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        return payload, ""
    per_page = min(max(_int(query.get("per_page"), PER_PAGE), 1), MAX_PER_PAGE)
    page = max(_int(query.get("page"), 1), 1)
    last = max(1, -(-len(items) // per_page))
    chunk = items[(page - 1) * per_page : page * per_page]
    rels = [("next", page + 1)] if page < last else []
    rels += [("last", last)] if page < last else []
    rels += [("first", 1), ("prev", min(page - 1, last))] if page > 1 else []
    link = ", ".join(f'<{base}?{urlencode(dict(query, page=str(n)))}>; rel="{rel}"' for rel, n in rels)
    if isinstance(payload, dict):
        return dict(payload, check_runs=chunk), link
    return chunk, link


def _int(value, default: int) -> int:
    return int(value) if str(value or "").isdigit() else default


def _route(gh: FakeGitHub, method: str, path: str, query: dict, body: dict):
    if path == "/user":
        return 200, {"login": LOGIN}
    m = re.match(r"^/repos/([^/]+/[^/]+)/(.*)$", path)
    if not m or m.group(1) != gh.repo.slug:
        return NOT_FOUND
    rest, r = m.group(2), gh.repo
    for pattern, fn in ROUTES:
        hit = re.match(pattern, f"{method} {rest}")
        if hit:
            return fn(gh, r, query, body, *[int(x) if x.isdigit() else x for x in hit.groups()])
    return NOT_FOUND


def _issues(gh, r, query, body):
    out = []
    every = [_issue_out(gh, r, i) for i in r.issues.values()] + [_pull_as_issue(p) for p in r.pulls.values()]
    for issue in every:
        if issue["state"] != query.get("state", "open"):
            continue
        names = {x["name"] for x in issue["labels"]}
        if query.get("labels") and not set(query["labels"].split(",")) <= names:
            continue
        if query.get("milestone") and (issue.get("milestone") or {}).get("number") != int(query["milestone"]):
            continue
        if query.get("assignee") and query["assignee"] not in {a["login"] for a in issue["assignees"]}:
            continue
        out.append(issue)
    return 200, _sorted(out, query)


def _sorted(items: list, query: dict) -> list:
    """Newest first unless ``direction=asc`` (numbers follow creation, as on GitHub)."""
    return sorted(items, key=lambda i: i["number"], reverse=query.get("direction", "desc") != "asc")


def _issue_out(gh, r, issue: dict) -> dict:
    """An issue as GitHub serves it: with its sub-issue and dependency counts where the server has them."""
    if not gh.dependencies:
        return issue
    n = issue["number"]
    kids = [r.issues[k] for k in r.sub_issues.get(n, []) if k in r.issues]
    done = sum(1 for k in kids if k["state"] == "closed")
    blockers = [r.issues[b] for b in r.blocked_by.get(n, []) if b in r.issues]
    blocking = [r.issues[i] for i, bs in r.blocked_by.items() if n in bs and i in r.issues]
    return dict(
        issue,
        sub_issues_summary={
            "total": len(kids),
            "completed": done,
            "percent_completed": done * 100 // len(kids) if kids else 0,
        },
        issue_dependencies_summary={
            "blocked_by": sum(1 for b in blockers if b["state"] == "open"),
            "total_blocked_by": len(blockers),
            "blocking": sum(1 for b in blocking if b["state"] == "open"),
            "total_blocking": len(blocking),
        },
    )


def _pull_as_issue(p: dict) -> dict:
    return {
        "number": p["number"],
        "title": p["title"],
        "body": p["body"],
        "state": "closed" if p["state"] != "open" else "open",
        "labels": p["labels"],
        "assignees": [],
        "pull_request": {"url": p["html_url"]},
    }


def _issue(gh, r, query, body, n):
    return (200, _issue_out(gh, r, r.issues[n])) if n in r.issues else NOT_FOUND


def _related(kind: str):
    """GET issues/N/sub_issues, dependencies/blocked_by and dependencies/blocking: full issues."""

    def get(gh, r, query, body, n):
        if not gh.dependencies or n not in r.issues:
            return NOT_FOUND
        if kind == "sub_issues":
            numbers = r.sub_issues.get(n, [])
        elif kind == "blocked_by":
            numbers = r.blocked_by.get(n, [])
        else:
            numbers = [i for i, bs in r.blocked_by.items() if n in bs]
        return 200, [_issue_out(gh, r, r.issues[x]) for x in numbers if x in r.issues]

    return get


def _relate(kind: str):
    """POST issues/N/sub_issues {sub_issue_id} and dependencies/blocked_by {issue_id}: database ids."""

    def post(gh, r, query, body, n):
        field = "sub_issue_id" if kind == "sub_issues" else "issue_id"
        by_id = {i["id"]: num for num, i in r.issues.items()}
        other = by_id.get(_int(body.get(field), -1))
        if not gh.dependencies or n not in r.issues or other is None:
            return NOT_FOUND
        (r.sub_issues if kind == "sub_issues" else r.blocked_by).setdefault(n, []).append(other)
        return 201, _issue_out(gh, r, r.issues[n])

    return post


def _patch_issue(gh, r, query, body, n):
    target = r.issues.get(n) or r.pulls.get(n)
    if target is None:
        return NOT_FOUND
    if "state" in body:
        target["state"] = body["state"]
    if "labels" in body:
        target["labels"] = [{"name": x} for x in body["labels"]]
    return 200, target


def _comments(gh, r, query, body, n):
    return 200, r.comments.get(n, [])


def _add_comment(gh, r, query, body, n):
    entry = gh._said(LOGIN, str(body.get("body") or ""))
    r.comments.setdefault(n, []).append(entry)
    return 201, entry


def _pulls(gh, r, query, body):
    state = query.get("state", "open")
    return 200, _sorted([p for p in r.pulls.values() if state == "all" or p["state"] == state], query)


def _create_pull(gh, r, query, body):
    n = gh.open_pull(
        str(body.get("title") or ""), str(body.get("head") or ""), str(body.get("body") or ""), LOGIN
    )
    return 201, r.pulls[n]


def _pull(gh, r, query, body, n):
    return (200, r.pulls[n]) if n in r.pulls else NOT_FOUND


def _merge(gh, r, query, body, n):
    p = r.pulls.get(n)
    if p is None:
        return NOT_FOUND
    if p["state"] != "open":
        return 405, {"message": "Pull Request is not mergeable"}
    if body.get("sha") and body["sha"] != p["head"]["sha"]:
        return 409, {"message": "Head branch was modified. Review and try the merge again."}
    p.update(state="closed", merged=True, merged_at=r.now())
    return 200, {"sha": p["head"]["sha"], "merged": True, "message": "Pull Request successfully merged"}


def _list(name):
    def get(gh, r, query, body, n):
        return 200, getattr(r, name).get(n, [])

    return get


def _add_review(gh, r, query, body, n):
    entry = dict(gh._said(LOGIN, str(body.get("body") or "")), state=str(body.get("event") or "COMMENTED"))
    entry["submitted_at"] = entry.pop("created_at")
    r.reviews[n].append(entry)
    for c in body.get("comments") or []:
        r.review_comments[n].append(gh._said(LOGIN, str(c.get("body") or "")))
    return 200, entry


def _add_review_comment(gh, r, query, body, n, reply_to=None):
    entry = gh._said(LOGIN, str(body.get("body") or ""))
    if reply_to or body.get("in_reply_to"):
        entry["in_reply_to_id"] = int(reply_to or body["in_reply_to"])
    r.review_comments[n].append(entry)
    return 201, entry


def _checks(gh, r, query, body, sha):
    runs = r.checks.get(sha, [])
    return 200, {"total_count": len(runs), "check_runs": runs}


def _milestones(gh, r, query, body):
    return 200, r.milestones


ROUTES = [
    (r"^GET issues$", _issues),
    (r"^GET issues/(\d+)$", _issue),
    (r"^PATCH issues/(\d+)$", _patch_issue),
    (r"^GET issues/(\d+)/comments$", _comments),
    (r"^POST issues/(\d+)/comments$", _add_comment),
    (r"^GET issues/(\d+)/sub_issues$", _related("sub_issues")),
    (r"^POST issues/(\d+)/sub_issues$", _relate("sub_issues")),
    (r"^GET issues/(\d+)/dependencies/blocked_by$", _related("blocked_by")),
    (r"^POST issues/(\d+)/dependencies/blocked_by$", _relate("blocked_by")),
    (r"^GET issues/(\d+)/dependencies/blocking$", _related("blocking")),
    (r"^GET milestones$", _milestones),
    (r"^GET pulls$", _pulls),
    (r"^POST pulls$", _create_pull),
    (r"^GET pulls/(\d+)$", _pull),
    (r"^PUT pulls/(\d+)/merge$", _merge),
    (r"^GET pulls/(\d+)/commits$", _list("commits")),
    (r"^GET pulls/(\d+)/reviews$", _list("reviews")),
    (r"^POST pulls/(\d+)/reviews$", _add_review),
    (r"^GET pulls/(\d+)/comments$", _list("review_comments")),
    (r"^POST pulls/(\d+)/comments$", _add_review_comment),
    (r"^POST pulls/(\d+)/comments/(\d+)/replies$", _add_review_comment),
    (r"^GET commits/([0-9a-f]+)/check-runs$", _checks),
]
