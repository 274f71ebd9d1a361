"""A row must never stop or jam the fleet (issue 26 items 3, 4 and 10), the same assertions on
SQLite and on a real PostgreSQL: a row a claim cannot take is set aside and the next claimed; a
loop that cannot be prepared waits, then ends STOPPED:prepare_failed at the third failure for
the same reason; a live worker's name is its own; what a row may hold is bounded at submit and
in what a list reads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO as CHECKOUT
from conftest import lw_env
from loopwright.registry import LeaseLost, RegistryError, migrate, open_registry
from loopwright.registry.faults import BAD_ROW, PREPARE_FAILED, prepare_verdict
from loopwright.registry.rowlimits import MAX_COUNTER, MAX_SPEC

REPO = "https://example.com/r.git"
BIG = 2**63 - 1  # PostgreSQL's bigint at its end: + 1 overflows


def submit(reg, name: str, **kw) -> dict:
    return reg.submit(kind="prompt", spec=kw.pop("spec", {"goal": name}), repo=REPO, name=name, **kw)


def sql(reg, statement: str, args: tuple = ()) -> None:
    with reg.backend.tx() as tx:
        tx.run(statement, args)


def events(reg, name: str, kind: str) -> list[dict]:
    return [e for e in reg.events(reg.fleet_loop(name)["id"]) if e["kind"] == kind]


def refuse_running(reg, name: str, also_ended: bool = False) -> None:
    """A constraint someone added: the database refuses to make row ``name`` running (and, with
    ``also_ended``, to end it)."""
    states = "('running', 'ended')" if also_ended else "('running')"
    if reg.backend.dialect == "postgres":
        check = f"CHECK (name <> '{name}' OR status NOT IN {states})"
        sql(reg, f"ALTER TABLE fleet_loops ADD CONSTRAINT no_{name} {check} NOT VALID")
    else:
        sql(
            reg,
            f"CREATE TRIGGER no_{name} BEFORE UPDATE ON fleet_loops WHEN NEW.name = '{name}' "
            f"AND NEW.status IN {states} BEGIN SELECT RAISE(ABORT, 'refused'); END",
        )


@pytest.mark.parametrize("allowed", [None, lambda repo: True], ids=["any", "allow-list"])
def test_rows_whose_counters_are_out_of_range_are_set_aside_and_the_next_is_claimed(reg, allowed):
    for name in ("int-max", "huge", "negative", "good"):
        submit(reg, name)
    sql(reg, "UPDATE fleet_loops SET generation = 2147483647 WHERE name = 'int-max'")
    sql(reg, "UPDATE fleet_loops SET generation = %s WHERE name = 'huge'", (BIG,))
    sql(reg, "UPDATE fleet_loops SET failovers = -1, worker = 'gone' WHERE name = 'negative'")
    taken = reg.claim("w1", "h", allowed=allowed)
    assert taken["name"] == "good" and taken["generation"] == 1
    for name, key in (("int-max", "generation"), ("huge", "generation"), ("negative", "failovers")):
        row = reg.fleet_loop(name)
        assert (row["status"], row["outcome"], row["worker"]) == ("ended", BAD_ROW, None), name
        assert f"its {key} is" in row["reason"] and "set aside by worker w1" in row["reason"]
        assert [e["data"]["reason"] for e in events(reg, name, "set_aside")] == [row["reason"]]
    assert reg.claim("w1", "h", allowed=allowed) is None


def test_a_counter_of_the_wrong_type_is_set_aside_on_sqlite(tmp_path):
    reg = open_registry(str(tmp_path / "r.sqlite"))  # SQLite keeps any value in any column
    try:
        submit(reg, "texty")
        submit(reg, "good")
        sql(reg, "UPDATE fleet_loops SET generation = 'many' WHERE name = 'texty'")
        assert reg.claim("w1", "h")["name"] == "good"
        assert reg.fleet_loop("texty")["outcome"] == BAD_ROW
    finally:
        reg.close()


@pytest.mark.parametrize("allowed", [None, lambda repo: True], ids=["any", "allow-list"])
def test_a_row_the_database_refuses_to_claim_is_set_aside_with_the_databases_reason(reg, allowed):
    submit(reg, "poison")
    submit(reg, "good")
    refuse_running(reg, "poison")
    assert reg.claim("w1", "h", allowed=allowed)["name"] == "good"
    row = reg.fleet_loop("poison")
    assert (row["status"], row["outcome"]) == ("ended", BAD_ROW)
    assert "IntegrityError" in row["reason"] or "CheckViolation" in row["reason"], row["reason"]


def test_a_row_that_refuses_even_to_be_set_aside_is_passed_over(reg):
    submit(reg, "stuck")
    submit(reg, "good")
    refuse_running(reg, "stuck", also_ended=True)
    assert reg.claim("w1", "h")["name"] == "good"
    assert reg.fleet_loop("stuck")["status"] == "queued"  # as it was: nothing this claim could do
    submit(reg, "later")
    assert reg.claim("w1", "h")["name"] == "later"  # and the claims after pass it over
    assert reg.claim("w1", "h") is None


def test_counters_are_64_bit_in_an_older_postgresql_registry_too(pg_url, monkeypatch):
    monkeypatch.setattr(migrate, "STEPS", migrate.STEPS[:4])  # the registry as loopwright made it before
    old = open_registry(pg_url)
    submit(old, "old")
    old.close()
    monkeypatch.undo()
    reg = open_registry(pg_url)
    try:
        assert reg.schema_status()["version"] == migrate.latest()
        sql(reg, "UPDATE fleet_loops SET generation = %s, iteration = %s WHERE name = 'old'", (2**40, 2**40))
        event = "INSERT INTO fleet_events (loop_id, at, generation, kind, data) VALUES ('x', 0, %s, 'k', '')"
        sql(reg, event, (2**40,))
        assert reg.fleet_loop("old")["generation"] == 2**40 > MAX_COUNTER
        assert reg.claim("w1", "h") is None and reg.fleet_loop("old")["outcome"] == BAD_ROW
    finally:
        reg.close()


# --- a loop that cannot be prepared ------------------------------------------------------------


def test_the_waits_grow_and_the_third_failure_for_one_reason_ends_the_loop():
    assert prepare_verdict(None, 0, "no branch 'mian'", 10) == (1, 10.0)
    assert prepare_verdict("no branch 'mian'", 1, "no branch 'mian'", 10) == (2, 40.0)
    assert prepare_verdict("no branch 'mian'", 2, "no branch 'mian'", 10) == (3, None)
    assert prepare_verdict("no branch 'mian'", 2, "clone failed", 10) == (1, 10.0)  # another reason
    assert prepare_verdict("x", "2", "x", 10) == (1, 10.0)  # a count someone wrote as text


def test_a_loop_that_cannot_be_prepared_waits_then_ends_stopped_prepare_failed(reg):
    loop = submit(reg, "typo", branch="mian")
    submit(reg, "good")
    why = "the remote has no branch 'mian' to start loopwright/typo from"
    first = reg.claim("w1", "h")
    assert first["name"] == "typo"
    assert reg.prepare_failed(loop["id"], 1, why, 600) == {"tries": 1, "ended": False, "wait": 600.0}
    row = reg.fleet_loop("typo")
    assert (row["status"], row["worker"], row["prepare_failures"]) == ("queued", None, 1)
    assert "failed 1 of 3 times: " + why in row["reason"] and row["not_before"] > row["updated_at"]
    with pytest.raises(LeaseLost):  # fenced: the claim is gone
        reg.prepare_failed(loop["id"], 1, why, 600)
    assert reg.claim("w1", "h")["name"] == "good"  # the loop waits: the one after it runs
    assert reg.claim("w1", "h") is None
    for tries in (2, 3):
        sql(reg, "UPDATE fleet_loops SET not_before = {now} - 1 WHERE name = 'typo'")  # its wait is over
        again = reg.claim("w2", "h")
        assert (again["name"], again["generation"]) == ("typo", tries)
        said = reg.prepare_failed(loop["id"], tries, why, 600)
        assert (said["tries"], said["ended"]) == (tries, tries == 3)
    row = reg.fleet_loop("typo")
    assert (row["status"], row["outcome"], row["worker"]) == ("ended", PREPARE_FAILED, None)
    assert row["reason"] == f"preparing the loop failed 3 of 3 times: {why}"
    timeline = [e["data"] for e in events(reg, "typo", "prepare_failed")]
    assert [(d["tries"], d["wait"], d["error"]) for d in timeline] == [
        (1, 600.0, why),
        (2, 2400.0, why),
        (3, None, why),
    ]
    listed = {r["name"]: r for r in reg.fleet_loops()}
    assert listed["typo"]["reason"] == row["reason"]


def test_a_new_reason_starts_the_count_again(reg):
    loop = submit(reg, "flaky")
    for gen, why in enumerate(("a", "a", "b", "b"), start=1):
        sql(reg, "UPDATE fleet_loops SET not_before = NULL WHERE name = 'flaky'")
        assert reg.claim("w1", "h")["generation"] == gen
        assert reg.prepare_failed(loop["id"], gen, why, 0)["tries"] == (1, 2, 1, 2)[gen - 1]
    assert reg.fleet_loop("flaky")["status"] == "queued"


# --- a worker's name ---------------------------------------------------------------------------


def test_a_live_workers_name_is_refused_and_a_gone_ones_is_taken(reg):
    reg.hold_worker_name("w", "alpha", 2, None, "token-a", 1.0)
    with pytest.raises(RegistryError) as caught:
        reg.hold_worker_name("w", "beta", 1, None, "token-b", 1.0)
    said = str(caught.value)
    assert "\n" not in said and said.startswith("a worker named w is running on alpha (it beat")
    assert "give this one another --name" in said
    assert reg.worker_beat("w", "alpha", 2, 1, None, [], token="token-a", heartbeat=1.0) is True
    assert [(w["worker"], w["host"]) for w in reg.workers()] == [("w", "alpha")]
    sql(reg, "UPDATE fleet_workers SET beat_at = beat_at - 60 WHERE worker = 'w'")  # it died a minute ago
    reg.hold_worker_name("w", "beta", 1, None, "token-b", 1.0)
    assert [(w["worker"], w["host"]) for w in reg.workers()] == [("w", "beta")]
    # The one back from the dead finds its name taken, and changes nothing.
    assert reg.worker_beat("w", "alpha", 2, 0, None, [], token="token-a", heartbeat=1.0) is False
    assert reg.workers()[0]["host"] == "beta"
    reg.let_go_of_name("w", "token-a")  # not its to let go of
    with pytest.raises(RegistryError):
        reg.hold_worker_name("w", "gamma", 1, None, "token-c", 1.0)
    reg.let_go_of_name("w", "token-b")  # a worker that stopped: the name is free at once
    reg.hold_worker_name("w", "gamma", 1, None, "token-c", 1.0)


# --- what a row may hold -----------------------------------------------------------------------


def test_a_submit_refuses_a_row_bigger_than_the_fleet_takes(reg):
    for bad, words in (
        ({"spec": {"goal": "g" * MAX_SPEC}}, "the loop's spec is"),
        ({"tags": [f"t{i}" for i in range(33)]}, "at most 32 tags"),
        ({"tags": ["t" * 65]}, "at most 32 tags of at most 64 characters"),
        ({"account": "a" * 129}, "the account name is 129 characters"),
    ):
        with pytest.raises(RegistryError, match=words):
            submit(reg, "big", **bad)
    with pytest.raises(RegistryError, match="the repository URL is"):
        reg.submit(kind="prompt", spec={"goal": "g"}, repo="https://e.com/" + "r" * 2048)
    assert reg.fleet_loops() == []
    submit(reg, "fits", spec={"goal": "g" * 100_000}, tags=[f"t{i}" for i in range(32)])


def test_a_list_reads_a_bounded_head_of_a_huge_goal_written_by_sql(reg):
    submit(reg, "huge", spec={"limits": {"max_iterations": 3}, "goal": "first line\n" + "x" * 100})
    submit(reg, "plain")
    text = '{"limits": {"max_iterations": 3}, "goal": "first line\\n' + "x" * 10_000_000 + '"}'
    sql(reg, "UPDATE fleet_loops SET spec = %s, state = %s WHERE name = 'huge'", (text, "[" * 100_000))
    rows = {r["name"]: r for r in reg.fleet_loops()}
    huge = rows["huge"]
    assert huge["cut"] == ["spec", "state"] and huge["state"] is None
    assert huge["spec"]["limits"] == {"max_iterations": 3}
    assert huge["spec"]["goal"].startswith("first line\nxxx") and len(huge["spec"]["goal"]) < 4000
    assert rows["plain"]["cut"] == [] and rows["plain"]["spec"] == {"goal": "plain"}
    assert len(reg.fleet_loop("huge")["spec"]["goal"]) > 10_000_000  # one loop in full, on demand


# Runs a command and prints its exit code and its peak RSS in KiB: its own, not the test's.
PEAK = (
    "import resource, subprocess, sys\n"
    "out = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print(out.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)
MAX_LS_KIB = 100_000  # measured: about 40 MB (57 MB on SQLite, which reads the value); 133 MB before


def test_fleet_ls_of_a_10_mb_goal_written_by_sql_stays_small(registry_url):
    reg = open_registry(registry_url)
    try:
        submit(reg, "huge")
        # 10 MB in UTF-8, written as JSON escapes (as json.dumps writes it): 30 MB of text.
        huge = json.dumps({"limits": {}, "goal": "the first line\n" + "é" * 5_000_000})
        sql(reg, "UPDATE fleet_loops SET spec = %s WHERE name = 'huge'", (huge,))
    finally:
        reg.close()
    for args in (["fleet", "ls"], ["fleet", "ls", "--json"]):
        argv = [sys.executable, "-c", PEAK, str(CHECKOUT / "bin" / "loopwright"), *args, "--db", registry_url]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=lw_env())
        code, kib = (int(n) for n in out.stdout.split())
        assert code == 0 and kib < MAX_LS_KIB, (args, code, kib)
    shown = subprocess.run(
        [str(CHECKOUT / "bin" / "loopwright"), "fleet", "ls", "--db", registry_url],
        capture_output=True, text=True, timeout=120, env=lw_env(),
    )  # fmt: skip
    assert "the first line" in shown.stdout and len(shown.stdout) < 1000


def test_holds_written_by_hand_out_of_range_are_shown_as_none(reg):
    """A hold below 0, NaN or past any budget in a row someone wrote is none in `fleet limits`,
    on the page and in the metrics (a sum of them would be NaN or absurd); a good one counts."""
    for name in ("negative", "nan", "huge", "good"):
        submit(reg, name)
        assert reg.claim("w1", "h")["name"] == name
    nan = "'NaN'::float8" if reg.backend.dialect == "postgres" else "NULL"  # SQLite keeps no NaN
    sql(reg, "UPDATE fleet_loops SET reserved = -5 WHERE name = 'negative'")
    sql(reg, f"UPDATE fleet_loops SET reserved = {nan} WHERE name = 'nan'")
    sql(reg, "UPDATE fleet_loops SET reserved = 1e300 WHERE name = 'huge'")
    sql(reg, "UPDATE fleet_loops SET reserved = 2.5 WHERE name = 'good'")
    reg.set_limits("fleet", max_dollars_per_day=100)
    fleet = reg.limits_report()["limits"][0]
    assert (fleet["running"], fleet["held"]) == (4, 2.5)
    assert fleet["held_unknown"] == (0 if reg.backend.dialect == "postgres" else 1)
