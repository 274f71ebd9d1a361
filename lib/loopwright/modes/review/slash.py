"""/loopwright:review [--loop] --pr N …, handled at UserPromptSubmit (and by `loopwright run review …`).

With ``--loop`` it checks gh (installed, logged in), reads the PR once, and starts the
watch. Without ``--loop`` it writes nothing: the agent does one ordinary review round."""

from __future__ import annotations

from pathlib import Path

from loopwright.actions import start as starting
from loopwright.core import slashargs
from loopwright.modes import gh
from loopwright.modes.review import pr as prs
from loopwright.modes.review import watch
from loopwright.state import loops

MODE_NAME = "review"
OPTIONS = {
    "--loop": False,
    "--pr": True,
    "--repo": True,
    "--agent": True,
    "--hold-label": True,
    "--merge-method": True,
    "--max-iterations": True,
    "--max-minutes": True,
    "--max-tokens": True,
    "--max-dollars": True,
    "--gates": True,
    "--accept-project-rates": False,
    "--wrap-up": False,
    "--no-wrap-up": False,
    "--wrap-up-floor": True,
    "--lock": True,
    "--name": True,
}
USAGE = (
    "usage: /loopwright:review [--loop] --pr N [--repo OWNER/NAME] [--agent LOGIN[,LOGIN]] "
    "[--hold-label LABEL] [--merge-method squash|merge|rebase] [--max-iterations N] [--max-minutes N]"
)


def command(state: Path, session: str | None, args: str, tpath: str | None = None) -> str:
    text, opts = slashargs.parse(args, OPTIONS)
    if text.strip() and "--pr" not in opts and text.strip().lstrip("#").isdigit():
        opts["--pr"] = text.strip()  # /loopwright:review --loop 142
    elif text.strip():
        raise loops.LoopError(f"unexpected text {text.strip()[:60]!r}; {USAGE}")
    if not opts.get("--pr"):
        raise loops.LoopError(f"--pr is missing; {USAGE}")
    cfg = settings(state.parent, opts)
    view = watch.read(cfg)
    if view.problem:
        raise loops.LoopError(view.problem)
    end = prs.terminal(view, cfg["hold_label"])
    if end:
        raise loops.LoopError(f"PR #{cfg['pr']} is already {end}: there is nothing to watch")
    if not opts.get("--loop"):
        return (
            f"loopwright: PR #{cfg['pr']} of {cfg['repo']['slug']} is open at {view.head[:12]} (no loop: add "
            "--loop to watch it). Do one review-response round: review the change (`gh pr diff`), post your "
            "comments, address open comments with commits and replies, re-evaluate once, and "
            "report to the user."
        )
    req = starting.StartRequest(
        prompt=f"Watch PR #{cfg['pr']} of {cfg['repo']['slug']} with the review-mode contract.",
        mode=MODE_NAME,
        session=session,
        name=str(opts.get("--name") or MODE_NAME),
        mode_config={"review": cfg},
        mode_state={"mine_seen": view.mine},
        transcript_path=tpath,
    )
    starting.apply_limits(req, opts)
    _, loop = starting.start(state, req)
    return starting.announcement(loop)


def settings(project: Path, opts: dict) -> dict:
    repo = gh.resolve_repo(str(project), opts.get("--repo"))
    login = gh.Gh(repo).login()  # gh missing or logged out: one line, no loop
    method = str(opts.get("--merge-method") or "squash")
    if method not in ("squash", "merge", "rebase"):
        raise loops.LoopError(f"--merge-method must be squash, merge or rebase (got {method!r})")
    agents = [a.strip() for a in str(opts.get("--agent") or "").split(",") if a.strip()]
    return {
        "pr": gh.number(opts["--pr"], "--pr"),
        "repo": repo.to_dict(),
        "login": login,
        "agents": agents,
        "hold_label": str(opts.get("--hold-label") or prs.DEFAULT_HOLD_LABEL),
        "merge_method": method,
    }
