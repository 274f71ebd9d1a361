"""Reading the backlog a work loop grinds: the project's task registry, or GitHub issues
through ``gh``; and what the loop itself left behind (its pull requests, its worktrees).
The edge of work mode: everything here does I/O, the decisions are in backlog.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from loopwright.modes import gh
from loopwright.modes.work import backlog, fleet

TASKS, GITHUB = "tasks", "github"
SOURCES = (TASKS, GITHUB)
WORKTREES = ".loopwright/worktrees"  # inside the state directory, which git ignores
IN_PROGRESS_LABEL = "in-progress"
# GitHub dependency lists read per Stop beyond the two listings, so a Stop makes at most 2 + 8 gh calls
# however many issues have blockers or sub-issues; the others wait on the listing's counts alone.
DETAIL_CALLS = 8
RELATED_PAGE = 100  # GitHub allows 100 sub-issues per parent and 50 blockers per issue: one page each


class View:
    """One reading of the backlog: the open items, or the problem that stopped the reading;
    the loop's own pull requests and worktrees; for a loop sharing its backlog with a fleet's
    other loops, its share (modes/work/fleet.py), else None."""

    __slots__ = ("fleet", "items", "problem", "prs", "worktrees")

    def __init__(self, items=None, problem=None, prs=None, worktrees=None):
        self.items: list[dict] = items or []
        self.problem: str | None = problem
        self.prs: list[dict] = prs or []
        self.worktrees: list[dict] = worktrees or []
        self.fleet: dict | None = None


def branch_prefix(loop: dict) -> str:
    return f"loopwright/{loop['name']}/"


def read(loop: dict) -> View:
    cfg = loop.get("work") or {}
    share, problem = fleet.read_share(cfg["fleet_items"]) if cfg.get("fleet_items") else (None, None)
    try:
        if problem:
            view = View(problem=problem)  # fail closed: no item is this loop's
        elif cfg.get("source") == GITHUB:
            view = _github(loop, cfg)
        else:
            view = View(items=_tasks(loop))
    except gh.GhError as exc:
        view = View(problem=str(exc))
    except (OSError, ValueError) as exc:
        view = View(problem=f"the task registry cannot be read: {exc}")
    if share is not None and not view.problem:
        fleet.apply(view.items, share)
        view.fleet = share
    view.worktrees = worktrees(loop)
    return view


def _tasks(loop: dict) -> list[dict]:
    from loopwright.state import tasks as taskreg
    from loopwright.state.project import project_config, state_dir

    project = Path(loop["project_dir"])
    config, _ = project_config(project)
    state = state_dir(project)
    # The backlog as decided at start (loop.json's tasks_source): a later .loopwright.json cannot move it.
    try:
        own, foreign = taskreg.loop_files(loop, project, state, state, True, config)
        reg = taskreg.load(own if own is not None else taskreg.foreign_file(project, foreign))
    except taskreg.RegistryError as exc:
        raise ValueError(str(exc)) from None
    if reg.problems:
        raise ValueError(reg.problems[0])
    return [
        {
            "id": t["id"],
            "title": t["text"].splitlines()[0][:200],
            "body": t["text"],
            "depends_on": list(t.get("depends_on") or []),
            "in_progress": None,
            "url": None,
        }
        for t in reg.open
    ]


def _github(loop: dict, cfg: dict) -> View:
    client = gh.Gh(gh.Repo.from_dict(cfg.get("repo") or {}))
    repo = client.repo
    query = "issues?state=open&per_page=100"
    if cfg.get("labels"):
        query += "&labels=" + gh.q(",".join(cfg["labels"]))
    if cfg.get("milestone"):
        query += f"&milestone={int(cfg['milestone'])}"
    if cfg.get("assignee"):
        query += "&assignee=" + gh.q(cfg["assignee"])
    issues, pulls = gh.together(
        lambda: client.api(repo.path(query), paginate=True),
        lambda: client.api(repo.path("pulls?state=open&per_page=100"), paginate=True),
    )
    issues, pulls = issues or [], pulls or []
    claimed = _claimed_by_prs(pulls)
    me = cfg.get("login") or ""
    label = cfg.get("in_progress_label") or IN_PROGRESS_LABEL
    raw = [i for i in issues if isinstance(i, dict) and "pull_request" not in i]
    raw = [i for i in raw if isinstance(i.get("number"), int) and not isinstance(i["number"], bool)]
    items = [_issue(i, claimed, me, label) for i in raw]
    _native_links(client, raw, items)
    prefix = branch_prefix(loop)
    mine = [_pr_record(p) for p in pulls if isinstance(p, dict) and _head(p).startswith(prefix)]
    return View(items=items, prs=mine)


def _head(pr: dict) -> str:
    head = pr.get("head") if isinstance(pr.get("head"), dict) else {}
    return str(head.get("ref") or "")


def _pr_record(pr: dict) -> dict:
    head = pr.get("head") if isinstance(pr.get("head"), dict) else {}
    return {
        "number": int(pr.get("number") or 0),
        "branch": str(head.get("ref") or ""),
        "head_sha": str(head.get("sha") or "")[:64],
        "state": "merged" if pr.get("merged_at") else str(pr.get("state") or "open"),
    }


def _claimed_by_prs(pulls: list) -> dict[str, int]:
    """Issue id -> the open pull request that says it closes it."""
    claimed: dict[str, int] = {}
    for pr in pulls:
        if not isinstance(pr, dict):
            continue
        for item in backlog.closes(f"{pr.get('title') or ''}\n{pr.get('body') or ''}"):
            claimed.setdefault(item, int(pr.get("number") or 0))
    return claimed


def _issue(issue: dict, claimed: dict[str, int], me: str, label: str) -> dict:
    item_id = f"#{issue['number']}"
    body = str(issue.get("body") or "")
    after, blocks = backlog.issue_links(body)
    labels = [str(lb.get("name")) for lb in issue.get("labels") or [] if isinstance(lb, dict)]
    owners = [
        str(a.get("login"))
        for a in issue.get("assignees") or []
        if isinstance(a, dict) and a.get("login") != me
    ]
    busy = None
    if item_id in claimed:
        busy = f"open pull request #{claimed[item_id]}"
    elif label in labels:
        busy = f"labelled {label}"
    elif owners:
        busy = f"assigned to {', '.join(owners)}"
    return {
        "id": item_id,
        "title": str(issue.get("title") or "")[:200],
        "body": body,
        "depends_on": after,
        "blocks": blocks,
        "open_deps": [],  # GitHub says these are open: they hold the issue even outside the backlog's filter
        "in_progress": busy,
        "url": issue.get("html_url"),
    }


def _native_links(client: gh.Gh, raw: list[dict], items: list[dict]) -> None:
    """GitHub's own links, beside the body's lines: an issue waits for its open blockers (issue
    dependencies) and its open sub-issues. The listing's summaries say which issues have any, so
    only those lists are read: at most DETAIL_CALLS, idle issues and low numbers first. An issue
    whose lists were not read (or failed) waits on the counts alone, unnamed."""
    wanted = []
    pairs = sorted(zip(raw, items), key=lambda p: (bool(p[1]["in_progress"]), p[0]["number"]))
    for issue, item in pairs:
        blockers, children = _open_counts(issue)
        if blockers:
            wanted.append((item, f"issues/{issue['number']}/dependencies/blocked_by", blockers))
        if children:
            wanted.append((item, f"issues/{issue['number']}/sub_issues", children))
    reads = wanted[:DETAIL_CALLS]
    answers = gh.together(*[lambda path=path: _related(client, path) for _, path, _ in reads])
    answers += [None] * (len(wanted) - len(reads))
    for (item, _, count), answer in zip(wanted, answers):
        # The count is GitHub's word that the issue is held; the list only names who holds it, so
        # an open one the list leaves out (another repository the login cannot see) still holds it.
        unread = count - _name_open(item, answer or [], client.repo.slug)
        if unread > 0:
            item["unread_deps"] = item.get("unread_deps", 0) + unread


def _name_open(item: dict, answer: list[dict], slug: str) -> int:
    """Adds the open issues of one list to the item's dependencies; how many it named."""
    named = 0
    for other in answer:
        ref = _ref(other, slug)
        if other.get("state") != "open" or ref is None or ref == item["id"]:
            continue
        named += 1
        for key in ("open_deps", "depends_on"):
            if ref not in item[key]:
                item[key].append(ref)
    return named


def _related(client: gh.Gh, path: str) -> list[dict] | None:
    """One dependency or sub-issue list, or None when it cannot be read (the counts still hold)."""
    try:
        answer = client.api(client.repo.path(f"{path}?per_page={RELATED_PAGE}"))
    except gh.GhError:
        return None
    return [x for x in answer if isinstance(x, dict)] if isinstance(answer, list) else None


def _open_counts(issue: dict) -> tuple[int, int]:
    """Open blockers and open sub-issues, from the summaries GitHub puts on each listed issue (absent on a
    server without these features: then only the body's lines link issues)."""
    deps = issue.get("issue_dependencies_summary")
    subs = issue.get("sub_issues_summary")
    deps, subs = (deps if isinstance(deps, dict) else {}), (subs if isinstance(subs, dict) else {})
    return _count(deps.get("blocked_by")), max(0, _count(subs.get("total")) - _count(subs.get("completed")))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**6 else 0


def _ref(issue: dict, slug: str) -> str | None:
    """``#N`` for an issue of this repository, ``OWNER/NAME#N`` for another's."""
    number = issue.get("number")
    if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 10**9:
        return None
    m = re.search(r"/repos/([^/]+/[^/]+)$", str(issue.get("repository_url") or ""))
    if not m or m.group(1).lower() == slug.lower():
        return f"#{number}"
    return f"{m.group(1)}#{number}" if gh.SLUG_RE.match(m.group(1)) else None


def worktrees(loop: dict) -> list[dict]:
    """The worktrees under .loopwright/worktrees/ (the loop's, failed ones included)."""
    project = Path(loop["project_dir"])
    try:
        out = subprocess.run(
            ["git", "-C", str(project), "worktree", "list", "--porcelain"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found, cur = [], {}
    for line in out.splitlines() + [""]:
        if not line.strip():
            if cur.get("path", "").startswith(str(project / WORKTREES) + "/"):
                found.append(
                    {
                        "path": str(Path(cur["path"]).relative_to(project)),
                        "branch": cur.get("branch", "").removeprefix("refs/heads/"),
                        "head_sha": cur.get("head", ""),
                    }
                )
            cur = {}
            continue
        key, _, value = line.partition(" ")
        cur[key if key != "worktree" else "path"] = value
    return found
