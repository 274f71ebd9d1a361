"""The fleet's commands as a team uses them, through bin/loopwright as a process on SQLite and
PostgreSQL: a gate's answer checked and recorded, `loopwright stop` on a fleet loop, submit's
database and options, bulk stop and cancel with a count and a confirmation, `fleet ls` and
`fleet workers` as tables, and following a timeline to its end."""

from __future__ import annotations

import getpass
import json
import socket
import subprocess

from conftest import REPO, lw_env, one_line_error
from loopwright.registry import open_registry

REPO_URL = "https://example.com/acme/a.git"


def lw(tmp_path, *args, stdin=None, **env):
    return subprocess.run(
        [str(REPO / "bin" / "loopwright"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=lw_env(XDG_DATA_HOME=str(tmp_path / "data"), **env),
        input=stdin,
        timeout=120,
    )


def submit(url: str, tmp_path, name: str, *extra: str) -> None:
    out = lw(tmp_path, "submit", "--db", url, "--repo", REPO_URL, "--name", name, *extra, "goal")
    assert out.returncode == 0, out.stderr


class Fleet:
    """The registry at ``url``, for a test to play a worker's part in (claims, gates, ends)."""

    def __init__(self, url: str) -> None:
        self.reg = open_registry(url)

    def close(self) -> None:
        self.reg.close()

    def at_gate(self, name: str, gate: dict) -> dict:
        """The loop claimed, then waiting at ``gate`` and handed back, as a worker leaves it."""
        row = self.reg.claim("w1", "host-a", lease=30)
        assert row["name"] == name
        self.reg.progress(row["id"], row["generation"], status="waiting_gate", gate=gate)
        self.reg.release(row["id"], row["generation"], f"waiting at gate {gate['name']}")
        return row


BUDGET_GATE = {"name": "budget-escalation", "question": "Continue?", "options": ["continue", "raise", "stop"]}


def test_fleet_answer_takes_only_the_gates_options_and_records_who_answered(registry_url, tmp_path):
    submit(registry_url, tmp_path, "gated")
    fleet = Fleet(registry_url)
    try:
        assert "no gate waits in fleet loop gated (it is queued)" in one_line_error(
            lw(tmp_path, "fleet", "answer", "gated", "continue", "--db", registry_url)
        )
        fleet.at_gate("gated", BUDGET_GATE)
        line = one_line_error(lw(tmp_path, "fleet", "answer", "gated", "maybe", "--db", registry_url))
        assert (
            line
            == "loopwright: error: 'maybe' is not an option of gate budget-escalation: continue, raise, stop"
        )
        assert fleet.reg.fleet_loop("gated")["status"] == "waiting_gate"  # still waiting, unanswered
        out = lw(tmp_path, "fleet", "answer", "gated", "continue", "--db", registry_url)
        assert out.returncode == 0, out.stderr
        assert (
            out.stdout == "gated: answered 'continue' at gate budget-escalation; queued again for a worker\n"
        )
        row = fleet.reg.fleet_loop("gated")
        events = fleet.reg.events(row["id"])
    finally:
        fleet.close()
    me = f"{getpass.getuser()}@{socket.gethostname()}"
    assert (row["status"], row["gate"]["answer"], row["gate"]["by"]) == ("queued", "continue", me)
    assert [(e["kind"], e["data"]) for e in events] == [
        ("answered", {"gate": "budget-escalation", "answer": "continue", "by": me})
    ]
    shown = json.loads(lw(tmp_path, "fleet", "events", "gated", "--db", registry_url, "--json").stdout)
    assert shown[-1]["kind"] == "answered" and shown[-1]["data"]["by"] == me


def test_a_gate_row_without_options_is_checked_against_the_gates_own(registry_url, tmp_path):
    submit(registry_url, tmp_path, "bare")
    fleet = Fleet(registry_url)
    try:
        fleet.at_gate("bare", {"name": "repeated-failure", "question": "Again?"})
    finally:
        fleet.close()
    line = one_line_error(lw(tmp_path, "fleet", "answer", "bare", "continue", "--db", registry_url))
    assert "'continue' is not an option of gate repeated-failure: skip, retry, stop" in line
    assert lw(tmp_path, "fleet", "answer", "bare", "retry", "--db", registry_url).returncode == 0
