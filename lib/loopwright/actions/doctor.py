"""``loopwright doctor``: is everything in place for loops to run, and if not, what to do."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from loopwright.core.errors import UnsafePath
from loopwright.state import lock as locks
from loopwright.state import loops, plugindir, store

PLUGIN_ROOT = plugindir.root()  # this checkout, or the copy installed with the package
PACKAGES = ("click", "portalocker", "psutil")
SERVE_PACKAGES = ("starlette", "uvicorn", "prometheus_client")  # only `loopwright serve` needs them
FLEET_PACKAGES = ("psycopg", "psycopg_pool")  # only a fleet on PostgreSQL needs them
FLEET_INSTALL = "pip install '/path/to/loopwright[fleet]' from a checkout (it is not on PyPI)"
OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass
class Check:
    level: str
    what: str
    detail: str = ""


def _packages() -> list[Check]:
    out = []
    for name in PACKAGES:
        try:
            importlib.import_module(name)
            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                version = "(version unknown)"
            out.append(Check(OK, f"package {name}", version))
        except ImportError:
            out.append(
                Check(
                    FAIL,
                    f"package {name}",
                    "missing: start a new Claude Code session (the SessionStart hook installs it) or pip "
                    "install -r requirements.txt",
                )
            )
    for name in SERVE_PACKAGES:
        try:
            version = metadata.version(name)
            out.append(Check(OK, f"package {name}", f"{version} (for loopwright serve)"))
        except metadata.PackageNotFoundError:
            out.append(Check(WARN, f"package {name}", "missing: only `loopwright serve` needs it"))
    out += _fleet_packages()
    try:
        version = metadata.version("google-re2")
        out.append(Check(OK, "package google-re2", f"{version} (runs CLAUDE.md redaction patterns)"))
    except metadata.PackageNotFoundError:
        why = "missing: CLAUDE.md redaction patterns are skipped until it is installed"
        out.append(Check(WARN, "package google-re2", why))
    return out + _programs()


def _fleet_packages() -> list[Check]:
    """psycopg and its pool: a failure when $LOOPWRIGHT_DATABASE_URL names a PostgreSQL fleet
    (every fleet command would fail), else only a note."""
    fleet = (os.environ.get("LOOPWRIGHT_DATABASE_URL") or "").startswith(("postgresql:", "postgres:"))
    out = []
    for name in FLEET_PACKAGES:
        try:
            importlib.import_module(name)
            out.append(Check(OK, f"package {name}", f"{_version(name)} (for the fleet on PostgreSQL)"))
        except ImportError:
            if fleet:
                why = (
                    f"missing, and LOOPWRIGHT_DATABASE_URL names a PostgreSQL fleet: {FLEET_INSTALL}; in"
                    " Claude Code a new session installs them"
                )
                out.append(Check(FAIL, f"package {name}", why))
            else:
                out.append(
                    Check(
                        WARN,
                        f"package {name}",
                        f"missing: only a fleet on PostgreSQL needs it: {FLEET_INSTALL}",
                    )
                )
    return out


def _version(name: str) -> str:
    try:
        return metadata.version(name.replace("_", "-"))
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def _programs() -> list[Check]:
    """gh (GitHub work and review loops) and Claude Code's CLI (`run`, the worker)."""
    gh = shutil.which(os.environ.get("LOOPWRIGHT_GH") or "gh")
    claude = shutil.which(os.environ.get("LOOPWRIGHT_CLAUDE") or "claude")
    return [
        Check(OK, "gh", f"{gh} (for GitHub work and review loops)")
        if gh
        else Check(WARN, "gh", "missing: only work loops over GitHub issues and review loops need it"),
        Check(OK, "claude", f"{claude} (for loopwright run and the worker)")
        if claude
        else Check(
            WARN,
            "claude",
            "Claude Code's CLI is not on PATH: `loopwright run` and the worker need it (install it, or "
            "give --claude PATH or set LOOPWRIGHT_CLAUDE)",
        ),
    ]


def _interpreter() -> list[Check]:
    checks = [
        Check(
            OK if sys.version_info >= (3, 9) else FAIL,
            "python",
            f"{sys.version.split()[0]} at {sys.executable}",
        )
    ]
    chosen = os.environ.get("LOOPWRIGHT_PYTHON")
    if chosen:
        checks.append(Check(OK if os.access(chosen, os.X_OK) else FAIL, "LOOPWRIGHT_PYTHON", chosen))
    for var in ("CLAUDE_PLUGIN_DATA", "LOOPWRIGHT_DATA"):
        data = os.environ.get(var)
        if not data:
            continue
        venv = Path(data) / "venv"
        stamp = venv / ".loopwright-requirements"
        req = PLUGIN_ROOT / "requirements.txt"
        if not venv.exists():
            checks.append(
                Check(
                    WARN,
                    "plugin venv",
                    f"{venv} does not exist yet; the SessionStart hook creates it (log: "
                    f"{Path(data) / 'install.log'})",
                )
            )
        elif not stamp.exists() or (req.exists() and stamp.read_bytes() != req.read_bytes()):
            checks.append(
                Check(WARN, "plugin venv", f"{venv} is out of date; the next session start reinstalls it")
            )
        else:
            checks.append(Check(OK, "plugin venv", str(venv)))
        break
    return checks


def _wiring() -> list[Check]:
    checks = []
    manifest = PLUGIN_ROOT / ".claude-plugin" / "plugin.json"
    try:
        name = json.loads(manifest.read_text()).get("name")
        checks.append(
            Check(OK if name == "loopwright" else FAIL, "plugin manifest", f"{manifest} (name {name!r})")
        )
    except (OSError, ValueError) as exc:
        checks.append(Check(FAIL, "plugin manifest", f"{manifest}: {exc}"))
    hooks_file = PLUGIN_ROOT / "hooks" / "hooks.json"
    try:
        hooks = json.loads(hooks_file.read_text())["hooks"]
    except (OSError, ValueError, KeyError) as exc:
        return checks + [Check(FAIL, "hooks.json", f"{hooks_file}: {exc}")]
    for event in ("SessionStart", "UserPromptSubmit", "Stop", "PostToolUseFailure"):
        entries = [h for group in hooks.get(event, []) for h in group.get("hooks", [])]
        if not entries:
            checks.append(Check(FAIL, f"{event} hook", "not wired in hooks/hooks.json"))
            continue
        for h in entries:
            cmd = h.get("command", "").replace("${CLAUDE_PLUGIN_ROOT}", str(PLUGIN_ROOT)).strip('"')
            ok = os.access(cmd, os.X_OK)
            checks.append(
                Check(
                    OK if ok else FAIL, f"{event} hook", cmd if ok else f"{cmd} is missing or not executable"
                )
            )
    return checks


def _settings_files(project: Path) -> list[Path]:
    home = Path.home()
    return [
        home / ".claude" / "settings.json",
        project / ".claude" / "settings.json",
        project / ".claude" / "settings.local.json",
    ]


def _other_stop_hooks(project: Path) -> list[Check]:
    """Other Stop hooks that may block race with loopwright's (Claude Code picks one)."""
    found = []
    candidates = [(p, "settings") for p in _settings_files(project)]
    plugins = Path.home() / ".claude" / "plugins"
    if plugins.is_dir():
        for p in plugins.glob("*/*/*/hooks/hooks.json"):
            candidates.append((p, "plugin"))
        for p in plugins.glob("*/*/hooks/hooks.json"):
            candidates.append((p, "plugin"))
    for path, kind in candidates:
        try:
            if kind == "plugin" and PLUGIN_ROOT in path.resolve().parents:
                continue
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        hooks = data.get("hooks", {}) if isinstance(data, dict) else {}
        for group in hooks.get("Stop", []) if isinstance(hooks, dict) else []:
            for h in group.get("hooks", []) if isinstance(group, dict) else []:
                cmd = str(h.get("command", ""))
                if "loopwright" in cmd:
                    continue
                found.append(
                    Check(
                        WARN,
                        "other Stop hook",
                        f"{path}: {cmd[:120]} (if it also blocks, it races with loopwright)",
                    )
                )
    return found or [Check(OK, "other Stop hooks", "none found in settings or installed plugins")]


def _block_cap() -> Check:
    cap = os.environ.get("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "8")
    detail = (
        f"Claude Code ends a turn after {cap} Stop-hook blocks in a row without a tool call; loopwright "
        "then pauses the loop (it stays active; any message or /loopwright:resume continues it). Set "
        "CLAUDE_CODE_STOP_HOOK_BLOCK_CAP=0 to lift the cap for text-only loops."
    )
    return Check(OK, "block cap", detail)


def _key() -> Check:
    from loopwright.state import trust

    try:
        key = trust.load_key()
    except trust.KeyProblem as exc:
        return Check(FAIL, "loopwright key", f"{exc}: no loop can be trusted until it is fixed")
    if key is None:
        return Check(OK, "loopwright key", f"{trust.key_path()} is made when you start your first loop")
    return Check(OK, "loopwright key", f"{trust.key_path()} (signs the loops you start; keep it private)")


def _state(state: Path) -> list[Check]:
    try:
        loops.check_dirs(state)
    except UnsafePath as exc:
        return [Check(FAIL, "state", f"{exc}; loopwright ignores this project's loops until it is fixed")]
    if not (state / "loops").is_dir():
        return [Check(OK, "state", f"no loops in {state.parent} (nothing is created until a loop starts)")]
    now = time.time()
    checks = []
    for name in loops.loop_names(state):
        checks += _loop_checks(loops.LoopPaths(state, name), now)
    return checks


def _loop_checks(paths: loops.LoopPaths, now: float) -> list[Check]:
    name = paths.name
    checks = [Check(level, f"loop {name}", detail) for level, detail in _leftovers(paths)]
    try:
        cfg = loops.load_config(paths, move_corrupt=False)
        lk = loops.read_state(paths, "lock", move_corrupt=False)
        budget = loops.read_state(paths.configured(cfg), "budget", move_corrupt=False) or {} if cfg else {}
    except loops.UntrustedLoop as exc:
        found = [
            (
                WARN,
                f"untrusted, never run: {exc.why}. `loopwright adopt {name}` "
                "shows its goal and commands and can take it over",
            )
        ]
    except (store.CorruptFile, UnsafePath) as exc:
        found = [(FAIL, f"{exc}; its next Stop stops it safely, or `loopwright teardown {name} --force`")]
    else:
        found = _state_checks(paths, cfg, lk, budget, now)
    return checks + [Check(level, f"loop {name}", detail) for level, detail in found]


def _leftovers(paths: loops.LoopPaths) -> list[tuple[str, str]]:
    """Files a corrupt read or a killed writer left in the loop's folder."""
    found = [
        (WARN, f"{bad.name}: a corrupt file was moved aside here; inspect it, then delete it")
        for bad in sorted(paths.dir.glob("*.corrupt-*"))
    ]
    found += [
        (WARN, f"{tmp.name}: left by a writer that was killed; safe to delete")
        for tmp in sorted(paths.dir.glob(".*.tmp-*"))
    ]
    return found


def _state_checks(
    paths: loops.LoopPaths, cfg: dict | None, lk: dict | None, budget: dict, now: float
) -> list[tuple[str, str]]:
    name = paths.name
    if cfg is None:
        return [(WARN, f"no loop.json; remove with `loopwright teardown {name} --force`")]
    if cfg.get("status") != loops.ACTIVE:
        return [(OK, f"ended {cfg.get('outcome')}")]
    found = []
    if not paths.marker.exists():
        found.append(
            (
                FAIL,
                "active but its marker in .loopwright/active/ is missing, so the Stop hook skips it; "
                f"run `loopwright resume {name}`",
            )
        )
    if (budget.get("router") or {}).get("last_action") == "pause":
        found.append(
            (WARN, "paused by Claude Code's block cap; send a message in its session or /loopwright:resume")
        )
    if not cfg.get("owner_session"):
        found.append((WARN, f"no session owns it yet; attach it with /loopwright:resume {name}"))
    elif lk and locks.is_stale(lk, now):
        found.append(
            (
                WARN,
                f"active, but its lock is stale ({locks.describe(lk)}): its session is gone; "
                f"`loopwright resume {name}` in a new session takes it over",
            )
        )
    else:
        found.append((OK, f"active, owner {cfg.get('owner_session')}"))
    return found


def _statusline() -> Check:
    command = f"{PLUGIN_ROOT / 'bin' / 'loopwright'} statusline"
    try:
        settings = json.loads((Path.home() / ".claude" / "settings.json").read_text())
    except (OSError, ValueError):
        settings = {}
    current = (settings.get("statusLine") or {}).get("command", "") if isinstance(settings, dict) else ""
    if "loopwright" in str(current):
        return Check(OK, "status line", current)
    return Check(
        OK,
        "status line",
        f'optional: add {{"statusLine": {{"type": "command", "command": "{command}"}}}} '
        "to ~/.claude/settings.json",
    )


def run(state: Path) -> list[Check]:
    project = state.parent
    return [
        *_interpreter(),
        *_packages(),
        *_wiring(),
        *_other_stop_hooks(project),
        _block_cap(),
        _statusline(),
        _key(),
        *_state(state),
    ]
