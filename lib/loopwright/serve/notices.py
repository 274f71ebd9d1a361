"""`serve --notify`: the monitor tells of every loop it shows (a run's, a terminal's, a
session's) when it ends and when a gate starts waiting for an answer, each event once:
the registry remembers what was told, across restarts, and events from before the
monitor first notified are not news."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from loopwright.core.clock import now_iso, parse_iso
from loopwright.runner import notify
from loopwright.state import loops


class Watcher:
    def __init__(self, projects: list[Path], registry, specs: list[str], report, poll: float = 2.0):
        self.projects, self.registry, self.poll = list(projects), registry, poll
        self.notifiers = notify.Notifiers(list(specs), report, own_loop=False)
        self.seen: set[str] = set()  # keys already in the registry: not asked again every poll

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            for event in self.scan():
                self.notifiers.send(event)
            time.sleep(self.poll)

    def scan(self) -> list[dict]:
        """The events not told yet (each recorded as told before it is sent: at most once)."""
        since = parse_iso(self.registry.notify_since()) or 0.0
        out = []
        for project in self.projects:
            for key, when, event in events_of(project):
                if key in self.seen:
                    continue
                self.seen.add(key)
                if self.registry.first_notice(key) and (parse_iso(when) or 0.0) >= since:
                    out.append(dict(event, project=str(project), at=now_iso()))
        return out


def events_of(project: Path) -> list[tuple[str, str, dict]]:
    """(key, when, event) of every loop of ``project`` that ended or has gates waiting;
    loops this user's loopwright did not write are not read."""
    from loopwright.core.errors import UnsafePath
    from loopwright.state import store

    state = project / ".loopwright"
    try:
        names = loops.loop_names(state)
    except (loops.LoopError, UnsafePath, OSError):
        return []
    out = []
    for name in names:
        paths = loops.LoopPaths(state, name)
        try:
            cfg = loops.load_config(paths, move_corrupt=False)
            if not cfg:
                continue
            paths.configured(cfg)
            budget = loops.read_state(paths, "budget", move_corrupt=False) or {}
        except (loops.LoopError, store.CorruptFile, UnsafePath, OSError, ValueError):
            continue
        out += _loop_events(f"{project}|{name}|{cfg.get('started_at')}", name, cfg, budget)
    return out


def _loop_events(key: str, name: str, cfg: dict, budget: dict) -> list[tuple[str, str, dict]]:
    if cfg.get("status") != loops.ACTIVE:
        ended = cfg.get("ended_at") or ""
        event = {
            "event": "loop_ended",
            "loop": name,
            "outcome": cfg.get("outcome"),
            "reason": cfg.get("end_reason"),
        }
        return [(f"{key}|ended", ended, event)]
    out = []
    for g in budget.get("pending_gates") or []:
        if g.get("answer"):
            continue
        gate = {"name": g.get("name"), "question": g.get("question"), "options": g.get("options")}
        event = {
            "event": "gate_waiting",
            "loop": name,
            "reason": f"gate {gate['name']}: {gate['question']}",
            "gates": [gate],
        }
        out.append((f"{key}|gate|{g.get('name')}|{g.get('asked_at')}", g.get("asked_at") or "", event))
    return out
