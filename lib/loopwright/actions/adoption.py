"""Adopting a loop this user's loopwright did not create (cloned, copied, written by another
user), on purpose and exactly as the user reviewed it.

``loopwright adopt NAME`` reads the loop's files once and shows what the loop would do,
with a digest of exactly the bytes it read (keyed with the user's key, so nobody else can
make two versions of a loop that share one). ``loopwright adopt NAME --yes DIGEST`` reads the
files once more and refuses unless they are still what the digest names. The adopted loop
is then built only from what that read parsed and checked, in a new directory of the user's
(0700): loop.json signed, the budget, history and tasks written again from their checked
contents. The old directory (whoever owns it, whoever can still write it) is renamed aside to
``loops/.foreign-<name>-<time>`` and never read again.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import time
from dataclasses import dataclass

from loopwright import modes
from loopwright.core import jsoncodec, router, schema
from loopwright.core.errors import UnsafePath
from loopwright.state import journal, loops, store, trust
from loopwright.state import lock as locks
from loopwright.state import tasks as taskreg
from loopwright.state.fspath import Path

DIGEST_CHARS = 16  # an HMAC under the user's key: nobody else can aim at one
DIGEST_DOMAIN = b"loopwright-adopt-v1\0"
TASKS_SHOWN = 10


@dataclass
class Seen:
    """A foreign loop as one read found it: the bytes, what they parse to, their digest."""

    paths: loops.LoopPaths
    raw: list  # (role, bytes or None), in digest order
    cfg: dict
    budget: dict | None
    history: list
    history_skipped: int
    tasks: list  # task entries (task and task-tombstone lines), oldest first
    tasks_file: bool
    cancelled: bool
    digest: str


def _refuse(paths: loops.LoopPaths, why: object) -> loops.LoopError:
    return loops.LoopError(
        f"loop {paths.name} cannot be adopted: {why}; remove it with "
        f"`loopwright teardown {paths.name} --force`"
    )


def _foreign_loop(state: Path, name: str) -> loops.LoopPaths:
    """The loop ``name``, when it is not this user's trusted loop and its directory is a real one."""
    from loopwright.actions.pick import pick_loop

    paths = pick_loop(state, name, None, active_only=False, trusted=False)
    st = os.lstat(paths.dir)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{paths.dir} is a symlink or not a directory; loopwright does not follow it")
    try:
        loops.load_config(paths, move_corrupt=False)
        raise loops.LoopError(f"loop {paths.name} is already yours; nothing to adopt")
    except loops.UntrustedLoop:
        pass
    return paths


def _read(paths: loops.LoopPaths, path: Path, limit: int) -> bytes | None:
    try:
        return store.read_regular(path, limit)
    except (UnsafePath, ValueError) as exc:
        raise _refuse(paths, f"{path.name}: {exc}") from None
    except OSError as exc:
        raise _refuse(paths, f"{path} cannot be read ({exc.strerror})") from None


def _parse_config(paths: loops.LoopPaths, data: bytes | None) -> dict:
    if data is None:
        raise loops.LoopError(
            f"loop {paths.name} has no readable loop.json; it cannot be adopted, only removed "
            f"(`loopwright teardown {paths.name} --force`)"
        )
    try:
        cfg = jsoncodec.loads(data)
        if not isinstance(cfg, dict):
            raise schema.SchemaError("loop.json: expected a JSON object")
        schema.check(schema.LOOP, cfg, "loop.json")
        loops.check_loop_values(paths, cfg)
        modes.get(cfg.get("mode"))
    except (jsoncodec.DecodeError, schema.SchemaError, UnsafePath, modes.UnknownMode) as exc:
        raise _refuse(paths, exc) from None
    return cfg


def _parse_budget(paths: loops.LoopPaths, cfg: dict, data: bytes | None) -> dict | None:
    if data is None:
        return None
    try:
        budget = jsoncodec.loads(data)
        schema.check(schema.BUDGET, budget, "budget.json")
        modes.check_state(modes.get(cfg["mode"]), budget)
    except (jsoncodec.DecodeError, schema.SchemaError) as exc:
        raise _refuse(paths, exc) from None
    return budget


def _digest(paths: loops.LoopPaths, raw: list) -> str:
    """HMAC-SHA256 under the user's key of the project, the name and every file's bytes."""
    try:
        key = trust.ensure_key()
    except trust.KeyProblem as exc:
        raise loops.LoopError(f"your loopwright key is unsafe: {exc}") from None
    parts = [DIGEST_DOMAIN, trust.real_project(paths.state).encode("utf-8", "surrogateescape"), b"\0"]
    parts += [paths.name.encode(), b"\0"]
    for role, data in raw:
        parts.append(role.encode() + b"\0" + (b"-" if data is None else b"+%d\0" % len(data) + data) + b"\0")
    return trust.hmac_sha256(key, b"".join(parts))[:DIGEST_CHARS]


def read_once(state: Path, name: str) -> Seen:
    """Read the foreign loop ``name``: every file it would bring once, checked, with the digest."""
    paths = _foreign_loop(state, name)
    config = _read(paths, paths.config, store.MAX_JSON_BYTES)
    cfg = _parse_config(paths, config)
    budget_path = loops.LoopPaths(paths.state, paths.name).configured(cfg).budget
    raw = [
        ("loop.json", config),
        ("budget", _read(paths, budget_path, store.MAX_JSON_BYTES)),
        ("history.jsonl", _read(paths, paths.history, store.MAX_JSONL_READ)),
        ("tasks.jsonl", _read(paths, paths.tasks, taskreg.MAX_FILE_BYTES)),
        ("cancelled", b"" if os.path.lexists(paths.tombstone) else None),
    ]
    budget = _parse_budget(paths, cfg, raw[1][1])
    history, problems = store._parse_lines(raw[2][1] or b"", paths.history, schema.HISTORY)
    skipped: list[str] = []
    tasks, _ = taskreg._parse_lines((raw[3][1] or b"").split(b"\n"), paths.tasks.name, skipped)
    return Seen(
        paths=paths,
        raw=raw,
        cfg=cfg,
        budget=budget,
        history=history,
        history_skipped=len(problems),
        tasks=tasks,
        tasks_file=raw[3][1] is not None,
        cancelled=raw[4][1] is not None,
        digest=_digest(paths, raw),
    )


def review(state: Path, name: str) -> tuple[Seen, list[str]]:
    """What a foreign loop would do if adopted, and the digest that confirms it."""
    seen = read_once(state, name)
    cfg, budget = seen.cfg, seen.budget
    ceil = budget or cfg
    lines = [
        f"Loop {seen.paths.name} ({cfg['mode']} mode, "
        f"{cfg['status']}{', ' + str(cfg['outcome']) if cfg.get('outcome') else ''}"
        f"{', cancelled' if seen.cancelled else ''})",
        "Goal (handed to the agent every iteration):",
        *("    " + ln for ln in str(cfg["prompt"]).splitlines()),
        f"Completion check run by loopwright: {cfg.get('verify') or 'none'}",
        "Completion judge (a headless Claude Code run by loopwright): "
        + (f"{cfg.get('judge_model')}" if cfg.get("judge") else "none"),
        f"Wrap-up turn when a budget runs out: {'off' if cfg.get('wrap_up') is False else 'on'}",
        *(
            f"Mode setting {k}: {cfg[k]}"
            for k in modes.get(cfg["mode"]).config_fields
            if cfg.get(k) is not None
        ),
        f"Ceilings: {ceil['max_iterations']} iterations, {ceil['max_minutes']:g} minutes, "
        f"${float(ceil.get('max_dollars') or 0):,.2f}"
        + (f", {ceil['max_tokens']} tokens" if ceil.get("max_tokens") else ""),
        _used_line(cfg, budget),
        f"History: {len(seen.history)} iteration line(s)"
        + (f" ({seen.history_skipped} damaged, not copied)" if seen.history_skipped else ""),
        *_task_lines(seen),
        f"Recorded owner session (cleared on adoption): {cfg.get('owner_session') or 'none'}",
    ]
    if cfg.get("accepted_rates"):  # confirmed by whoever started it, not by this user
        lines.append(f"Confirmed CLAUDE.md rates (cleared on adoption): {', '.join(cfg['accepted_rates'])}")
    return seen, lines


def _used_line(cfg: dict, budget: dict | None) -> str:
    where = (
        f" (kept in {cfg['budget_file']}; copied into the loop's directory)" if cfg.get("budget_file") else ""
    )
    if budget is None:
        return f"Used so far: nothing recorded (no budget file{where}); counting starts from zero"
    return (
        f"Used so far{where}: {budget.get('iterations_used', 0)} iterations, "
        f"{float(budget.get('minutes_elapsed') or 0):.1f} minutes since {budget.get('started_at')}, "
        f"${float(budget.get('dollars_estimate') or 0):,.2f}"
    )


def _task_lines(seen: Seen) -> list[str]:
    """The loop's own open tasks: their text goes into every prompt."""
    open_tasks, _ = taskreg._current(seen.tasks)
    lines = [f"Open tasks of the loop (shown to the agent in every prompt): {len(open_tasks)}"]
    for task in open_tasks[:TASKS_SHOWN]:
        text = task["text"] if len(task["text"]) <= 200 else task["text"][:199] + "…"
        lines.append(f"    [{task['id']}] {text}")
    if len(open_tasks) > TASKS_SHOWN:
        lines.append(f"    … and {len(open_tasks) - TASKS_SHOWN} more, all adopted with the loop")
    return lines


def adopt(state: Path, name: str, digest: str | None) -> str:
    """Make a foreign loop this user's own, exactly as reviewed: ``digest`` must be what the
    review printed for the files as they are now."""
    if not digest or not digest.strip():
        raise loops.LoopError(
            f"adopt --yes needs the digest the review prints: run `loopwright adopt {name}` first, read "
            "what the loop would do, then run the command it prints"
        )
    now = time.time()
    with loops.state_mutex(state):
        seen = read_once(state, name)
        given = digest.strip().lower().encode("utf-8", "surrogateescape")
        if not trust.compare_digest(seen.digest.encode(), given):
            raise loops.LoopError(
                f"loop {name} changed since you reviewed it (or the digest is mistyped); nothing was "
                f"adopted. Review it again: loopwright adopt {name}"
            )
        signed, fresh = _build(seen, now)
        aside = _swap(seen.paths, fresh, signed, now)
    paths = seen.paths
    journal.write(
        paths, dict(event="adopt", by="user", digest=seen.digest, previous=aside.name), session=None
    )
    where = "resume it" if signed["status"] == loops.ACTIVE else "reopen it"
    return (
        f"loopwright: loop {paths.name} is now yours, in a new private directory. Attach it to a session "
        f"to {where}: /loopwright:resume {paths.name} in that session, or "
        f"`loopwright resume {paths.name} --session ID`. Its files as they were are kept in "
        f"{aside} (nothing reads them); delete that directory when you no longer need it."
    )


def _build(seen: Seen, now: float) -> tuple[dict, Path]:
    """The adopted loop in a new 0700 directory beside the old one: from what was checked only."""
    paths = seen.paths
    cfg = dict(
        seen.cfg,
        project_dir=str(paths.state.parent),
        owner_session=None,
        adopted_at=locks.now_iso(now),
        loop_id=secrets.token_hex(16),  # a new loop: no record of the old one's end applies
        generation=0,
        budget_file=None,  # the budget moves in with the rest
    )
    cfg.pop("accepted_rates", None)  # rates below the built-in ones count only if this user says so
    cfg.pop("sig", None)
    budget = dict(seen.budget) if seen.budget is not None else router.initial_budget(cfg)
    for key in ("tick", "cursor"):  # the old writer's half-done tick and transcript are not ours
        budget.pop(key, None)
    budget.update(pending_gates=[], reports_offset=0)  # never replay another user's answers
    fresh = paths.state / "loops" / f".adopt-{secrets.token_hex(6)}"
    os.mkdir(fresh, 0o700)
    try:
        os.chmod(fresh, 0o700)
        store.write_json(fresh / "budget.json", budget)
        store.write_bytes_atomic(
            fresh / "history.jsonl", b"".join(jsoncodec.dumps(h) + b"\n" for h in seen.history)
        )
        if seen.tasks_file:
            store.write_bytes_atomic(
                fresh / "tasks.jsonl", b"".join(jsoncodec.dumps(t) + b"\n" for t in seen.tasks)
            )
        if seen.cancelled:
            store.write_text(fresh / "cancelled", f"{locks.now_iso(now)} cancelled before it was adopted\n")
        signed = loops.sign_config(paths, cfg)
        store.write_json(fresh / "loop.json", signed)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    return signed, fresh


def _swap(paths: loops.LoopPaths, fresh: Path, signed: dict, now: float) -> Path:
    """Put the new directory in the old one's place; the old one is renamed aside."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    aside = paths.state / "loops" / f".foreign-{paths.name}-{stamp}-{secrets.token_hex(3)}"
    loops.set_owner_index(paths, None)
    try:
        os.rename(paths.dir, aside)
    except OSError as exc:
        shutil.rmtree(fresh, ignore_errors=True)
        raise loops.LoopError(
            f"loop {paths.name} could not be moved aside ({exc.strerror}); nothing was adopted"
        ) from None
    try:
        os.rename(fresh, paths.dir)
    except OSError:
        os.rename(aside, paths.dir)
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    if signed["status"] == loops.ACTIVE:
        loops.mark_active(paths)
    else:
        loops.clear_active(paths)
    loops.set_owner_index(paths, loops.owner_entry(paths.name, signed))
    return aside
