"""Where loops stand, as data: what `status --json`, the monitor's API and its page show.
Read-only: a damaged or untrusted loop is described, never changed."""

from __future__ import annotations

from pathlib import Path

from loopwright.core import jsoncodec, router
from loopwright.core.errors import UnsafePath
from loopwright.state import loops, store


def _mode_fields(cfg: dict, budget: dict) -> dict:
    """The mode's own loop.json keys and its status words."""
    from loopwright import modes

    try:
        mode = modes.get(cfg.get("mode"))
    except modes.UnknownMode:
        return {"mode_status": []}
    return {**{k: cfg.get(k) for k in mode.config_fields}, "mode_status": mode.status_parts(cfg, budget)}


def _counters(budget: dict) -> dict:
    """The work and review counters (sdd's budget record) that status shows."""
    return {
        "comments_pushed": budget.get("comments_pushed", 0),
        "merges_attempted": budget.get("merges_attempted", 0),
        "tracked_prs": budget.get("tracked_prs") or [],
        "active_worktrees": budget.get("active_worktrees") or [],
    }


def project_rates(cfg: dict, cache: dict | None = None) -> dict | None:
    """For an active loop: its project's CLAUDE.md rates below the built-in ones (whether
    each counts toward the dollar ceiling) and the file's problems; ``cache`` holds one
    reading per project for a whole `status`."""
    from loopwright.state import claudemd

    project = cfg.get("project_dir")
    if cfg.get("status") != loops.ACTIVE or not isinstance(project, str):
        return None
    cache = {} if cache is None else cache
    if project not in cache:
        cache[project] = claudemd.load(claudemd.Path(project))
    rules = cache[project]
    return {
        "lowered": claudemd.lowered_rates(rules, cfg.get("accepted_rates")),
        "problems": list(rules.problems),
        "file": rules.path.name if rules.path is not None else None,
    }


def _untrusted(paths: loops.LoopPaths, exc: loops.UntrustedLoop) -> dict:
    ended_copy = isinstance(exc, loops.EndedCopy)
    return {
        "name": paths.name,
        "status": "untrusted",
        "problem": exc.why,
        "trusted": False,
        "ended_copy": ended_copy,
    }


def _ending_fields(paths: loops.LoopPaths, budget: dict, cfg: dict) -> dict:
    """The report, the wrap-up setting, the wrap-up turn under way or done, and its handoff;
    the completion judge's setting and record (core/judge.py; None for a loop without one);
    the headless client's last error."""
    from loopwright.core import judge, wrapup
    from loopwright.state import handoff

    record = (budget.get("router") or {}).get("wrap_up")
    return {
        "report": str(paths.report) if paths.report.exists() else None,
        "wrap_up": budget.get("wrap_up", cfg.get("wrap_up")) is not False,
        "wrap_up_floor": wrapup.floor(budget),
        "wrapping_up": bool(wrapup.open_record(budget)) and cfg.get("status") == loops.ACTIVE,
        "wrap_up_turn": record if isinstance(record, dict) else None,
        "handoff": str(paths.handoff) if handoff.present(paths) else None,
        "judge": judge.summary(cfg, budget),
        "last_error": _last_error(paths),
    }


def _last_error(paths: loops.LoopPaths) -> str | None:
    """What the headless client last gave up on (runner/causes.py), until a tick rewrote
    progress.json: an API error, or its last stderr lines."""
    try:
        progress = loops.read_state(paths, "progress", move_corrupt=False) or {}
    except (store.CorruptFile, UnsafePath, OSError):
        return None
    error = progress.get("last_error")
    return error if isinstance(error, str) and error else None


def loop_summary(paths: loops.LoopPaths, cache: dict | None = None) -> dict:
    """One loop for `status`. Read-only: a damaged or untrusted loop is described, never changed."""
    try:
        cfg = loops.load_config(paths, move_corrupt=False)
        if cfg is None:
            raise loops.LoopError("it has no loop.json")
        paths.configured(cfg)
    except loops.UntrustedLoop as exc:
        return _untrusted(paths, exc)
    except (loops.LoopError, store.CorruptFile, UnsafePath) as exc:
        return {"name": paths.name, "status": "damaged", "problem": str(exc), "trusted": True}
    problem = None
    try:
        budget = loops.read_state(paths, "budget", move_corrupt=False) or {}
    except (store.CorruptFile, UnsafePath) as exc:
        budget, problem = {}, str(exc)
    used = int(budget.get("iterations_used", 0))
    active = cfg.get("status") == loops.ACTIVE
    r = budget.get("router") or {}
    return {
        "name": cfg.get("name", paths.name),
        "mode": cfg.get("mode"),
        "status": loops.ACTIVE if active else loops.ENDED,
        "outcome": cfg.get("outcome"),
        "iteration": used + 1 if active else used,
        "max_iterations": budget.get("max_iterations", cfg.get("max_iterations")),
        "owner_session": cfg.get("owner_session"),
        "started_at": cfg.get("started_at"),
        "ended_at": cfg.get("ended_at"),
        "last_reason": cfg.get("end_reason") if not active else r.get("last_reason"),
        "minutes_elapsed": budget.get("minutes_elapsed", 0.0),
        "max_minutes": budget.get("max_minutes", cfg.get("max_minutes")),
        "tokens_in": budget.get("tokens_in", 0),
        "tokens_out": budget.get("tokens_out", 0),
        "max_tokens": budget.get("max_tokens", cfg.get("max_tokens")),
        "dollars_estimate": budget.get("dollars_estimate", 0.0),
        "max_dollars": budget.get("max_dollars", cfg.get("max_dollars")),
        "rate_table_source": budget.get("rate_table_source"),
        "project_rates": project_rates(cfg, cache),
        "unknown_models": budget.get("unknown_models") or [],
        "prs_touched": budget.get("prs_touched") or [],
        "max_prs": budget.get("max_prs", cfg.get("max_prs")),
        **_counters(budget),
        "pending_gates": [g["name"] for g in budget.get("pending_gates") or [] if not g.get("answer")],
        "waiting_gates": [
            {"name": g["name"], "question": g.get("question"), "options": g.get("options") or []}
            for g in budget.get("pending_gates") or []
            if not g.get("answer")
        ],
        "gates": budget.get("gates_log") or [],
        "pauses": r.get("pauses") or [],
        "paused": active and r.get("last_action") == router.PAUSE,
        "paused_at": r.get("paused_at") if active and r.get("last_action") == router.PAUSE else None,
        "prompt": cfg.get("prompt"),
        "tasks_source": cfg.get("tasks_source"),
        **_mode_fields(cfg, budget),
        **_ending_fields(paths, budget, cfg),
        "trusted": True,
        "problem": problem,
    }


SPEND_TAIL = 256 * 1024  # history lines are a few KiB: enough for the last ones charted


def spend_by_iteration(state: Path, name: str, last: int = 50) -> list[dict]:
    """Dollars per iteration of the loop's last ``last`` iterations, read from the end of
    its history (the monitor asks every second: the whole file would grow with the loop)."""
    try:
        tail = store.read_tail(loops.LoopPaths(state, name).history, SPEND_TAIL)
    except (OSError, UnsafePath):
        return []
    lines = tail.split(b"\n")[1 if len(tail) == SPEND_TAIL else 0 :]  # the first may be cut
    out = []
    for raw in lines:
        try:
            r = jsoncodec.loads(raw) if raw.strip() else None
        except jsoncodec.DecodeError:
            continue  # a torn or damaged line: the chart skips it
        if isinstance(r, dict):
            out.append({"iteration": r.get("iteration"), "dollars": float(r.get("dollars_this_iter") or 0.0)})
    return out[-last:]


def summaries(state: Path, name: str | None = None) -> tuple[list[dict], list[str]]:
    """Every loop of the project whose state directory is ``state`` (or loop ``name``), and
    the problems found, one line each."""
    names = [loops.validate_name(name)] if name else loops.loop_names(state)
    if name and not loops.LoopPaths(state, name).dir.is_dir():
        raise loops.LoopError(f"no loop named {name} in {state}")
    cache: dict = {}  # one CLAUDE.md reading per project
    found = [loop_summary(loops.LoopPaths(state, n), cache) for n in names]
    return found, [f"{s['name']}: {s['problem']}" for s in found if s.get("problem")]
