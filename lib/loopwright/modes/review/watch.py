"""Review mode's edge: reading the watched pull request through ``gh``, waiting for it to
move, and merging it. The rules are in pr.py, the decisions in mode.py."""

from __future__ import annotations

import time

from loopwright.core import jsoncodec
from loopwright.core.clock import now_iso
from loopwright.modes import gh
from loopwright.modes.review import pr as prs
from loopwright.state import store
from loopwright.state.fspath import Path

WAIT_FILE = "review-wait.json"  # the agent ran `loopwright review wait` (and what it saw)
MERGE_FILE = "review-merge.json"  # `loopwright review merge` wants the post-feedback-merge gate
MARKER_LIMIT = 64 * 1024


class Observation:
    __slots__ = ("view", "waited", "merge_request", "hold_label")

    def __init__(
        self,
        view: prs.PrView,
        waited: dict | None,
        merge_request: dict | None,
        hold_label: str = prs.DEFAULT_HOLD_LABEL,
    ):
        self.view, self.waited, self.merge_request = view, waited, merge_request
        self.hold_label = hold_label  # the loop's label that ends the watch


def client(cfg: dict) -> gh.Gh:
    return gh.Gh(gh.Repo.from_dict(cfg.get("repo") or {}))


def _login(item: dict) -> str:
    user = item.get("user") if isinstance(item.get("user"), dict) else {}
    return str(user.get("login") or "")


def is_agent(login: str, cfg: dict) -> bool:
    return login == cfg.get("login") or login in (cfg.get("agents") or []) or login.endswith("[bot]")


def read(cfg: dict) -> prs.PrView:
    """The PR, its checks, what others said and what the loop's login pushed."""
    number = int(cfg["pr"])
    try:
        c = client(cfg)
        base = c.repo.path(f"pulls/{number}")
        view = _pull(number, c.api(base))
        runs, reviews, remarks, comments, commits = gh.together(
            lambda: c.api(c.repo.path(f"commits/{view.head}/check-runs"), paginate=True) if view.head else [],
            lambda: c.api(base + "/reviews", paginate=True),
            lambda: c.api(base + "/comments", paginate=True),
            lambda: c.api(c.repo.path(f"issues/{number}/comments"), paginate=True),
            lambda: c.api(base + "/commits", paginate=True),
        )
        view.checks = [
            {"name": str(r.get("name")), "status": r.get("status"), "conclusion": r.get("conclusion")}
            for r in _check_runs(runs)
        ]
        said = (
            [(x, "review") for x in reviews or []]
            + [(x, "review-comment") for x in remarks or []]
            + [(x, "comment") for x in comments or []]
        )
        _said(view, said, cfg)
        commits = commits or []
        view.commits = [
            {"sha": str(x.get("sha")), "at": _commit_at(x)} for x in commits if isinstance(x, dict)
        ]
    except gh.GhError as exc:
        return prs.PrView(number, problem=str(exc))
    return view


def _check_runs(pages) -> list[dict]:
    """Every page's runs: GitHub pages them (30 a page unless asked), each page a ``check_runs`` wrapper,
    so a failing run past the first page still counts."""
    pages = pages if isinstance(pages, list) else [pages]
    runs = [p.get("check_runs") for p in pages if isinstance(p, dict)]
    return [r for page in runs if isinstance(page, list) for r in page if isinstance(r, dict)]


def _pull(number: int, pull) -> prs.PrView:
    if not isinstance(pull, dict):
        raise gh.GhError(f"gh api gave no pull request #{number}")
    view = prs.PrView(number)
    view.state = prs.MERGED if pull.get("merged") or pull.get("merged_at") else str(pull.get("state") or "")
    head = pull.get("head") if isinstance(pull.get("head"), dict) else {}
    view.head, view.branch = str(head.get("sha") or "")[:64], str(head.get("ref") or "")
    view.labels = [str(lb.get("name")) for lb in pull.get("labels") or [] if isinstance(lb, dict)]
    return view


def _said(view: prs.PrView, said: list, cfg: dict) -> None:
    for item, kind in said:
        if not isinstance(item, dict):
            continue
        login = _login(item)
        if is_agent(login, cfg):
            if login == cfg.get("login") and (kind != "review" or (item.get("body") or "").strip()):
                view.mine += 1
            continue
        at = str(item.get("submitted_at") or item.get("created_at") or "")
        approve = kind == "review" and item.get("state") == "APPROVED"
        view.feedback.append({"author": login, "at": at, "kind": kind, "approve": approve})


def _commit_at(item: dict) -> str:
    commit = item.get("commit") if isinstance(item.get("commit"), dict) else {}
    who = commit.get("committer") if isinstance(commit.get("committer"), dict) else {}
    return str(who.get("date") or "")


def observe(loop: dict, loop_dir: Path) -> Observation:
    cfg = loop.get("review") or {}
    hold = cfg.get("hold_label") or prs.DEFAULT_HOLD_LABEL
    return Observation(read(cfg), _marker(loop_dir / WAIT_FILE), _marker(loop_dir / MERGE_FILE), hold)


def _marker(path: Path) -> dict | None:
    try:
        raw = store.read_regular(path, MARKER_LIMIT)
        data = jsoncodec.loads(raw) if raw is not None else None
    except (ValueError, OSError, jsoncodec.DecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_marker(loop_dir: Path, name: str, data: dict) -> None:
    store.write_json(loop_dir / name, dict(data, at=now_iso()), durable=False)


def wait(
    cfg: dict, baseline: dict, max_wait: float, poll: float, busy: Path | None = None, tick=time.sleep
) -> tuple[str, prs.PrView]:
    """Poll the PR until it moves away from ``baseline`` (head, what others said, CI in
    flight) or ``max_wait`` seconds pass; what changed, and the last reading. Each poll
    rewrites ``busy`` so a headless runner does not take the quiet wait for a stall."""
    deadline = time.monotonic() + max_wait
    while True:
        if busy is not None:
            store.write_json(busy, {"what": "review wait", "at": now_iso()}, durable=False)
        view = read(cfg)
        changed = _changed(view, baseline, cfg)
        if changed:
            return changed, view
        if time.monotonic() + poll > deadline:
            return "", view
        tick(poll)


def _changed(view: prs.PrView, baseline: dict, cfg: dict) -> str:
    if view.problem:
        return ""  # a failed reading is not a change: keep waiting
    end = prs.terminal(view, cfg.get("hold_label") or "")
    if end:
        return f"PR #{view.number} {end}"
    if view.head != baseline.get("head"):
        return f"new commits on PR #{view.number} (head {view.head[:12]})"
    if view.activity() != baseline.get("activity"):
        return f"new reviews or comments on PR #{view.number}"
    if baseline.get("ci") and not prs.ci_running(view):
        return f"CI finished on PR #{view.number}"
    return ""


def merge(cfg: dict, head: str) -> str:
    """Merge the PR at ``head`` (GitHub refuses if the head moved meanwhile)."""
    c = client(cfg)
    method = cfg.get("merge_method") or "squash"
    answer = c.api(c.repo.path(f"pulls/{int(cfg['pr'])}/merge"), "PUT", {"sha": head, "merge_method": method})
    return str((answer or {}).get("message") or "merged")
