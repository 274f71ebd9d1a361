"""`loopwright fleet limits` (cli/fleet_limits.py) through click's runner on an embedded SQLite
registry: setting a scope's caps, showing them with today's spend and the pauses, clearing, and
one line with exit code 1 for what it refuses."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import refused
from loopwright.cli.fleet_limits import limits
from loopwright.registry import open_registry


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "runs.sqlite")


def run(db, *args):
    return CliRunner().invoke(limits, ["--db", db, *args], catch_exceptions=False)


def test_caps_are_set_per_scope_and_shown_with_todays_spend_and_pauses(db):
    assert run(db, "--max-dollars-per-day", "20").stdout == "fleet: at most $20.00 a day, - running at once\n"
    assert run(db, "--max-running", "4").stdout == "fleet: at most $20.00 a day, 4 running at once\n"
    out = run(db, "--account", "team-a", "--max-running", "2")
    assert out.stdout == "account:team-a: at most - a day, 2 running at once\n"
    assert run(db, "--tag", "night", "--max-dollars-per-day", "2.5").exit_code == 0
    reg = open_registry(db)
    loop = reg.submit(kind="prompt", spec={}, repo="/srv/r.git", account="team-a", tags=["night\x1b[31m"])
    reg.claim("w", "h")
    reg.record_spend(loop["id"], 1, 1.25, reserve=0.5, iteration=1, dollars=1.25)  # goes on: holds 2 x $0.50
    with reg.backend.tx() as tx:
        now = tx.one("SELECT {now} AS now")["now"]
    reg.pause_account("team-a", now + 3600, "usage limit (429)", "worker-1")
    reg.close()
    lines = run(db).stdout.splitlines()
    assert lines[0].startswith(f"fleet limits in {db}, day ") and "(UTC;" in lines[0]
    assert [line.split() for line in lines[1:6]] == [
        ["scope", "dollars/day", "spent", "today", "held", "running", "max", "running"],
        ["fleet", "$20.00", "$1.25", "$1.00", "1", "4"],
        ["account:team-a", "-", "$1.25", "$1.00", "1", "2"],
        ["tag:night", "$2.50", "$0.00", "$0.00", "0", "-"],
        ["tag:night\\e[31m", "-", "$1.25", "-", "-", "-"],  # spend without a cap; the name escaped
    ]
    assert lines[6].startswith("held: what running loops hold for iterations begun and not recorded yet")
    assert lines[7].split()[:4] == ["paused:", "account", "team-a", "until"]
    assert lines[7].endswith("UTC (usage limit (429), by worker-1); its loops wait for the reset")
    assert len(lines) == 8
    data = json.loads(run(db, "--json").stdout)
    assert [
        (r["scope"], r["spent_today"], r["held"], r["held_unknown"], r["running"]) for r in data["limits"]
    ] == [
        ("fleet", 1.25, 1.0, 0, 1),
        ("account:team-a", 1.25, 1.0, 0, 1),
        ("tag:night", 0.0, 0.0, 0, 0),
    ]
    assert data["iteration_mean"] == 1.25
    assert data["spend"]["tag:night\x1b[31m"] == 1.25 and data["pauses"][0]["account"] == "team-a"


def test_clear_removes_a_scopes_limits(db):
    run(db, "--tag", "night", "--max-running", "1")
    assert run(db, "--tag", "night", "--clear").stdout == "tag:night: limits removed\n"
    assert run(db, "--tag", "night", "--clear").stdout == "tag:night: had no limits\n"
    assert json.loads(run(db, "--json").stdout)["limits"] == []
    assert run(db).stdout.splitlines()[1] == "no limits set and nothing spent today"


@pytest.mark.parametrize(
    "args, says",
    [
        (["--account", "a", "--tag", "t", "--max-running", "1"], "give --account or --tag, not both"),
        (["--clear", "--max-running", "1"], "--clear removes a scope's limits"),
        (["--max-running", "-1"], "--max-running is a number of 0 or more"),
        (["--max-dollars-per-day", "nan"], "--max-dollars-per-day is a number of 0 or more"),
        (["--account", "", "--max-running", "1"], "bad limits scope 'account:'"),
    ],
)
def test_what_it_refuses_is_one_line(db, args, says):
    assert says in refused(run(db, *args))
    assert json.loads(run(db, "--json").stdout)["limits"] == []
