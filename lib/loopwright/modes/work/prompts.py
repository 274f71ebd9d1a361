"""What a work loop tells the agent: the first turn, a work item with its contract, and a
gate turn. Pure text."""

from __future__ import annotations

from loopwright.core.modeapi import PromptParts, Tick
from loopwright.modes.work import backlog, source


def source_name(loop: dict) -> str:
    cfg = loop.get("work") or {}
    if cfg.get("source") == source.GITHUB:
        repo = cfg.get("repo") or {}
        return f"GitHub issues of {repo.get('slug')}" + _filters(cfg)
    return "the task registry"


def _filters(cfg: dict) -> str:
    parts = []
    if cfg.get("labels"):
        parts.append("labels " + ", ".join(cfg["labels"]))
    if cfg.get("milestone"):
        parts.append(f"milestone {cfg['milestone']}")
    if cfg.get("assignee"):
        parts.append(f"assignee {cfg['assignee']}")
    return f" ({'; '.join(parts)})" if parts else ""


def survey(loop: dict) -> str:
    return "\n".join(
        [
            f"This work loop grinds {source_name(loop)}, one item per iteration.",
            "loopwright reads the backlog when this turn ends and hands you the first item. Reply with one "
            "short line and end your turn now; do not start any work yet.",
        ]
    )


def next_prompt(loop: dict, st: dict, parts: PromptParts, tick: Tick) -> str:
    lines = parts.lead()
    turn = st.get("turn")
    if turn == "gate":
        lines.append(
            "In a work loop this turn is only for the gate above: ask the user, record the answer, then end "
            "your turn without other work, whatever the answer. loopwright acts on it when this turn ends "
            "and hands you the next item; this turn does not count as an iteration."
        )
    elif turn == "survey":
        lines.append("Reply with one short line and end your turn; loopwright reads the backlog again.")
    else:
        lines += item_text(loop, st)
    return "\n".join(lines)


def item_text(loop: dict, st: dict) -> list[str]:
    item = st.get("item") or {}
    item_id = str(item.get("id") or "")
    github = (loop.get("work") or {}).get("source") == source.GITHUB
    slug = item_id.lstrip("#").replace("/", "-")
    branch = f"{source.branch_prefix(loop)}{'issue-' + slug if github else slug}"
    path = f"{source.WORKTREES}/{loop['name']}-{'issue-' + slug if github else slug}"
    lines = []
    for other in st.get("escalate_now") or []:
        how = (
            "comment on it asking for checkable acceptance criteria "
            f"(`gh issue comment {other.lstrip('#')} ...`)"
            if github
            else "tell the user in one line that it needs checkable acceptance criteria"
        )
        lines.append(f"First, escalate {other}: {how}. Do not work on it.")
    lines += [
        f"Work item for this iteration: {item_id} — {item.get('title') or ''}",
        "<item>",
        backlog.excerpt(str(item.get("body") or "")),
        "</item>",
    ]
    if item.get("url"):
        lines.append(str(item["url"]))
    lines += ["", "The work-mode contract for this iteration:"]
    lines += _contract(item_id, branch, path, github)
    return lines


def _contract(item_id: str, branch: str, path: str, github: bool) -> list[str]:
    steps = [
        f"1. Work on {item_id} only, in its own worktree: `git worktree add {path} -b {branch}` "
        "(or, if it exists, carry on in it). Never remove a worktree, even when the work fails.",
        "2. Implement it against its acceptance criteria, with tests, and commit on that branch.",
    ]
    if github:
        steps.append(
            f"3. Push the branch and open one pull request whose body says `Closes {item_id}` "
            f"(`gh pr create --head {branch} ...`). A pull request counts against the loop's PR budget."
        )
        done = f"`loopwright report --outcome success --item '{item_id}' --pr <PR number>`"
    else:
        steps.append(f"3. When it is done and checked, mark it: `loopwright task complete {item_id}`.")
        done = f"`loopwright report --outcome success --item {item_id}`"
    steps += [
        f"4. Report: {done}. If it failed, report `--outcome failure --item '{item_id}' --root-cause "
        "'<one line>'` instead, leave the worktree as it is, and end your turn: the same failure twice asks "
        "the user.",
        "Then end your turn. Do not start another item: loopwright hands you the next one. Never close, "
        "assign or relabel items you are not working on, and do not add items to the backlog: new items "
        "make loopwright ask the user (backlog drift); name follow-up work in your report's --note.",
    ]
    return steps
