"""`serve --notify` (serve/notices.py) against real loops on disk: every loop shown is told
once when it ends and once per gate that starts waiting, also after a restart of the
monitor; events from before it first notified are not news."""

from __future__ import annotations

import json
import subprocess

from conftest import REPO, lw_env
from loopwright.registry import open_registry
from loopwright.serve import notices


def lw(project, *args):
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), *args],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def ask_gate(project, name: str, asked_at: str) -> None:
    path = project / ".loopwright" / "loops" / name / "budget.json"
    budget = json.loads(path.read_text())
    budget["pending_gates"] = [
        {
            "name": "budget-escalation",
            "question": "Approaching iterations (4/5). Continue, raise ceiling, or stop?",
            "options": ["continue", "raise", "stop"],
            "asked_at": asked_at,
            "asks": 1,
            "answer": None,
        }
    ]
    path.write_text(json.dumps(budget))


def since(reg, when: str) -> None:
    with reg.backend.tx() as tx:
        tx.run("DELETE FROM notified WHERE key = '#since'")
        tx.run("INSERT INTO notified (key, at) VALUES ('#since', %s)", (when,))


def test_each_end_and_each_waiting_gate_is_told_once(tmp_path, project):
    lw(project, "start", "--session", "S1", "--name", "done", "goal one")
    lw(project, "cancel", "done")
    lw(project, "start", "--session", "S2", "--name", "gated", "goal two")
    ask_gate(project, "gated", "2030-01-01T00:00:00Z")
    reg = open_registry(str(tmp_path / "runs.sqlite"))
    since(reg, "2000-01-01T00:00:00Z")
    sent = tmp_path / "sent.jsonl"
    watcher = notices.Watcher([project], reg, [f"command:cat >> {sent}; echo >> {sent}"], print)

    events = watcher.scan()
    for event in events:
        watcher.notifiers.send(event)
    told = [json.loads(line) for line in sent.read_text().splitlines() if line.strip()]
    assert sorted((e["event"], e["loop"]) for e in told) == [
        ("gate_waiting", "gated"),
        ("loop_ended", "done"),
    ]
    end = next(e for e in told if e["event"] == "loop_ended")
    assert (end["outcome"], end["project"]) == ("CANCELLED", str(project))
    gate = next(e for e in told if e["event"] == "gate_waiting")
    assert gate["gates"][0]["name"] == "budget-escalation" and "Approaching" in gate["reason"]

    assert watcher.scan() == []  # the next poll: nothing new
    assert notices.Watcher([project], reg, ["desktop"], print).scan() == []  # nor after a restart
    ask_gate(project, "gated", "2030-01-02T00:00:00Z")  # the gate asked again, afresh
    (again,) = notices.Watcher([project], reg, ["desktop"], print).scan()
    assert (again["event"], again["loop"]) == ("gate_waiting", "gated")
    reg.close()


def test_events_from_before_the_first_notice_are_not_news(tmp_path, project):
    lw(project, "start", "--session", "S1", "--name", "done", "goal one")
    lw(project, "cancel", "done")
    reg = open_registry(str(tmp_path / "runs.sqlite"))
    since(reg, "2999-01-01T00:00:00Z")  # notifying began after everything on disk
    assert notices.Watcher([project], reg, ["desktop"], print).scan() == []
    since(reg, "2000-01-01T00:00:00Z")
    assert notices.Watcher([project], reg, ["desktop"], print).scan() == []  # recorded, never told
    reg.close()


def test_a_loop_this_user_did_not_write_is_not_read(tmp_path, project):
    lw(project, "start", "--session", "S1", "--name", "done", "goal one")
    lw(project, "cancel", "done")
    config = project / ".loopwright" / "loops" / "done" / "loop.json"
    forged = json.loads(config.read_text())
    forged["outcome"] = "FORGED"
    config.write_text(json.dumps(forged))  # its signature no longer verifies
    reg = open_registry(str(tmp_path / "runs.sqlite"))
    since(reg, "2000-01-01T00:00:00Z")
    assert notices.Watcher([project], reg, ["desktop"], print).scan() == []
    reg.close()
