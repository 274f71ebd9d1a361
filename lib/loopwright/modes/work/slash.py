"""/loopwright:work [--loop] …, handled at UserPromptSubmit (and by `loopwright run work …`).

With ``--loop`` it checks the backlog can be read (for GitHub: gh installed and logged
in, the repository known) and starts the loop; the Stop hook then hands over one item
per iteration. Without ``--loop`` it changes nothing on disk: it names the next
workable item for one ordinary turn (sdd's opt-in rule)."""

from __future__ import annotations

from pathlib import Path

from loopwright.actions import start as starting
from loopwright.core import slashargs
from loopwright.modes import gh
from loopwright.modes.work import backlog, prompts, source
from loopwright.state import loops

MODE_NAME = "work"
OPTIONS = {
    "--loop": False,
    "--source": True,
    "--repo": True,
    "--label": True,
    "--milestone": True,
    "--assignee": True,
    "--in-progress-label": True,
    "--max-iterations": True,
    "--max-minutes": True,
    "--max-tokens": True,
    "--max-dollars": True,
    "--max-prs": True,
    "--gates": True,
    "--accept-project-rates": False,
    "--wrap-up": False,
    "--no-wrap-up": False,
    "--wrap-up-floor": True,
    "--lock": True,
    "--name": True,
}
USAGE = (
    "usage: /loopwright:work [--loop] [--source tasks|github] [--repo OWNER/NAME] [--label L[,L]] "
    "[--milestone M] [--assignee LOGIN] [--max-iterations N] [--max-prs N] [--max-minutes N] "
    "[--max-dollars N]"
)


def command(state: Path, session: str | None, args: str, tpath: str | None = None) -> str:
    text, opts = slashargs.parse(args, OPTIONS)
    if text.strip():
        raise loops.LoopError(f"unexpected text {text.strip()[:60]!r}; {USAGE}")
    cfg = settings(state.parent, opts)
    if not opts.get("--loop"):
        return _one_pass(state.parent, cfg)
    req = starting.StartRequest(
        prompt=f"Grind the backlog ({cfg['source']}) one item per iteration with the work-mode contract.",
        mode=MODE_NAME,
        session=session,
        name=str(opts.get("--name") or MODE_NAME),
        mode_config={"work": cfg},
        transcript_path=tpath,
    )
    starting.apply_limits(req, opts)
    _, loop = starting.start(state, req)
    return starting.announcement(loop)


def settings(project: Path, opts: dict) -> dict:
    """The loop's backlog settings; for GitHub, proof that gh works, and who it acts as."""
    src = str(opts.get("--source") or source.TASKS)
    if src not in source.SOURCES:
        raise loops.LoopError(f"--source must be tasks or github (got {src!r})")
    labels = [x.strip() for x in str(opts.get("--label") or "").split(",") if x.strip()]
    cfg = {
        "source": src,
        "labels": labels,
        "assignee": str(opts["--assignee"]) if opts.get("--assignee") else None,
        "in_progress_label": str(opts.get("--in-progress-label") or source.IN_PROGRESS_LABEL),
        "milestone": None,
        "repo": None,
        "login": None,
    }
    if src == source.GITHUB:
        repo = gh.resolve_repo(str(project), opts.get("--repo"))
        client = gh.Gh(repo)
        cfg["login"] = client.login()  # gh missing or logged out: one line, no loop
        cfg["repo"] = repo.to_dict()
        if opts.get("--milestone"):
            cfg["milestone"] = _milestone(client, str(opts["--milestone"]))
        if cfg["assignee"] == "@me":
            cfg["assignee"] = cfg["login"]
    elif any(opts.get(k) for k in ("--repo", "--milestone", "--assignee")) or labels:
        raise loops.LoopError(
            "--repo, --label, --milestone and --assignee filter GitHub issues: add --source github"
        )
    return cfg


def _milestone(client: gh.Gh, given: str) -> int:
    if given.strip().isdigit():
        return gh.number(given, "--milestone")
    found = client.api(client.repo.path("milestones?state=open&per_page=100"), paginate=True) or []
    for m in found:
        if isinstance(m, dict) and m.get("title") == given and isinstance(m.get("number"), int):
            return m["number"]
    raise loops.LoopError(f"no open milestone is called {given!r} in {client.repo.slug}")


def _one_pass(project: Path, cfg: dict) -> str:
    """Without --loop: the next workable item for this one turn; nothing is written."""
    loop = {"name": "work", "project_dir": str(project), "work": cfg}
    view = source.read(loop)
    if view.problem:
        raise loops.LoopError(view.problem)
    found = backlog.cycle(view.items)
    if found:
        edges = backlog.describe_cycle(found)
        return f"loopwright: Dependency cycle detected: {edges} — please resolve manually."
    workable, passed = backlog.split(view.items, [])
    if not workable:
        return f"loopwright: Backlog empty — nothing workable in {prompts.source_name(loop)}. Tell the user."
    item = workable[0]
    lines = [f"loopwright: one pass over {prompts.source_name(loop)} (no loop: add --loop for that)."]
    lines += [f"Not picked: {i}, {why}." for i, why in passed[:20]]
    vague = backlog.ambiguous(item, needs_section=item["id"].startswith("#"))
    if vague:
        lines.append(
            f"Careful: {item['id']} has ambiguous criteria ({vague}); ask the user before relying on it."
        )
    st = {"item": item, "escalate_now": []}
    return "\n".join(lines + [""] + prompts.item_text(loop, st))
