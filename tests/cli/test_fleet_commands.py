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


def test_loopwright_stop_names_a_fleet_loop_with_a_database(registry_url, tmp_path):
    submit(registry_url, tmp_path, "idle")
    submit(registry_url, tmp_path, "busy")
    fleet = Fleet(registry_url)
    try:
        fleet.reg.claim("w1", "host-a", lease=30)  # the older one: idle
    finally:
        fleet.close()
    out = lw(tmp_path, "stop", "idle", "--db", registry_url)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "idle: its worker on host-a hears within about a second and ends it at its next Stop "
        "(STOPPED:user_stop, with a report)\n"
    )
    # $LOOPWRIGHT_DATABASE_URL: a name that is no loop of this project is a fleet loop.
    out = lw(tmp_path, "stop", "busy", LOOPWRIGHT_DATABASE_URL=registry_url)
    assert out.stdout == "busy: ended now (STOPPED:user_stop): no worker was running it\n", out.stderr
    again = lw(tmp_path, "fleet", "stop", "busy", "--db", registry_url)
    assert again.stdout == "busy: had already ended (STOPPED:user_stop); nothing to stop\n"
    assert "no fleet loop 'nope'" in one_line_error(lw(tmp_path, "stop", "nope", "--db", registry_url))


def three_teams(url: str, tmp_path) -> None:
    submit(url, tmp_path, "a1", "--account", "team-a", "--tag", "nightly")
    submit(url, tmp_path, "a2", "--account", "team-a")
    submit(url, tmp_path, "b1", "--account", "team-b", "--tag", "nightly")


def statuses(url: str) -> dict:
    reg = open_registry(url)
    try:
        return {r["name"]: r["outcome"] or r["status"] for r in reg.fleet_loops()}
    finally:
        reg.close()


def test_bulk_cancel_counts_and_without_a_terminal_needs_yes(registry_url, tmp_path):
    three_teams(registry_url, tmp_path)
    line = one_line_error(lw(tmp_path, "fleet", "cancel", "--tag", "nightly", "--db", registry_url))
    assert line == (
        "loopwright: error: cancel 2 fleet loops (tag nightly) needs a confirmation: "
        "no terminal to ask, add --yes"
    )
    assert set(statuses(registry_url).values()) == {"queued"}
    out = lw(
        tmp_path, "fleet", "cancel", "--tag", "nightly", "--account", "team-a", "--yes", "--db", registry_url
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("asked 1 fleet loop to cancel: 1 ended now")
    assert statuses(registry_url) == {"a1": "CANCELLED", "a2": "queued", "b1": "queued"}
    none = lw(tmp_path, "fleet", "stop", "--account", "team-c", "--db", registry_url)
    assert none.stdout == "no fleet loop that has not ended matches account team-c: nothing to stop\n"
    both = lw(tmp_path, "fleet", "stop", "a2", "--status", "queued", "--db", registry_url)
    assert "give LOOP or a filter" in one_line_error(both)
    assert "give LOOP, or --status" in one_line_error(lw(tmp_path, "fleet", "stop", "--db", registry_url))


def test_bulk_stop_asks_on_a_terminal(registry_url, tmp_path):
    """The question on a real terminal (a pseudo-terminal as the command's stdin): "n" keeps
    the loops, "y" stops them."""
    import os
    import pty

    three_teams(registry_url, tmp_path)

    def asked(reply: str) -> subprocess.CompletedProcess:
        main, side = pty.openpty()
        try:
            os.write(main, reply.encode() + b"\n")
            argv = ["fleet", "stop", "--status", "queued", "--db", registry_url]
            proc = subprocess.run(
                [str(REPO / "bin" / "loopwright"), *argv],
                stdin=side, capture_output=True, text=True, timeout=120,
                env=lw_env(XDG_DATA_HOME=str(tmp_path / "data")),
            )  # fmt: skip
        finally:
            os.close(main)
            os.close(side)
        return proc

    kept = asked("n")
    assert "stop 3 fleet loops (status queued) in " in kept.stdout and kept.returncode == 1
    assert set(statuses(registry_url).values()) == {"queued"}
    done = asked("y")
    assert done.returncode == 0, done.stderr
    assert "asked 3 fleet loops to stop: 3 ended now" in done.stdout
    assert set(statuses(registry_url).values()) == {"STOPPED:user_stop"}
