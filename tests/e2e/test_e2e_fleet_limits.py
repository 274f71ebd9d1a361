"""The fleet's limits end to end, on PostgreSQL (the database machines share): two workers, each
as if on its own machine, drive loops with the real Claude Code CLI against the scripted
Messages API.

- The daily dollar budget (`loopwright fleet limits --max-dollars-per-day`) ends the running
  loops BUDGET_EXHAUSTED:fleet_dollars within about one iteration of the cap in all (the room
  under it is held for the iterations each loop has begun or may begin), and no worker claims a
  queued loop the room left would not pay for.
- A usage limit (HTTP 429) met by one loop pauses its account for the whole fleet until the
  reset: every loop of the account, on either worker, is handed back and waits; another
  account's loop goes on; after the reset the paused loops go on where they were."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import fakeapi
from fleetkit import (
    ByGoal,
    lw,
    lw_here,
    make_remote,
    row_of,
    start_worker,
    stop_worker,
    worker_log,
    working_in,
)
from waiting import wait_for

pytestmark = pytest.mark.e2e

# One iteration's usage, priced exactly (claude-sonnet-4-5: $3 and $15 a million tokens in and
# out): $0.1875 + $0.1875 = $0.375, a binary fraction, so that sums compare exactly.
USAGE = {
    "input_tokens": 62_500,
    "output_tokens": 12_500,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
ITERATION = 0.375
DONE = "\n<promise>DONE</promise>"
NO_RETRIES = {"CLAUDE_CODE_MAX_RETRIES": "0"}  # a 429 reaches the runner at once


@pytest.fixture
def remote(tmp_path) -> Path:
    return make_remote(tmp_path)


def submit(url: str, remote: Path, name: str, goal: str, *extra: str) -> None:
    out = lw_here("submit", "--db", url, "--repo", f"file://{remote}", "--name", name,
             "--completion-promise", "DONE", "--max-iterations", "10", *extra, goal)  # fmt: skip
    assert out.returncode == 0, out.stderr


def log_events(workers: list) -> list[dict]:
    """Every JSON line the workers wrote so far."""
    found = []
    for proc in workers:
        for line in worker_log(proc).splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def logged(workers: list, event: str, **match) -> list[dict]:
    """The workers' log lines of ``event`` whose fields have the values in ``match``."""
    found = [e for e in log_events(workers) if e.get("event") == event]
    return [e for e in found if all(e.get(k) == v for k, v in match.items())]


def all_ended(url: str, workers: list, *names: str) -> bool:
    """Whether every loop of ``names`` ended; a worker's error fails the wait at once."""
    errors = logged(workers, "error")
    assert not errors, errors
    return all(row_of(url, n).get("status") == "ended" for n in names)


def starter(url: str, remote: Path, server, tmp_path: Path):
    """Starts a worker as if on a machine of its own: its name, host, data and HOME."""

    def start(name: str, *extra: str, env: dict | None = None):
        home, data = tmp_path / f"home-{name}", tmp_path / f"data-{name}"
        return start_worker(
            url, remote, data, server, home, "--name", name, "--host", f"{name}-host", *extra, env=env
        )

    return start


def after_boundary(workers: list, loop: str, iteration: int, reply: fakeapi.Reply, claimed=()):
    """``reply``, once a worker has recorded ``loop``'s ``iteration`` (pushed it, written its
    spend and acted on what the spend said; the scripted model answers at once, a real one
    takes longer than a boundary does) and the loops ``claimed`` have been claimed."""

    def ready() -> bool:
        taken = {e["loop"] for e in logged(workers, "claimed")}
        return bool(logged(workers, "pushed", loop=loop, iteration=iteration)) and taken >= set(claimed)

    def answer(request):
        wait_for(ready, f"{loop}'s iteration {iteration} recorded", within=180, every=0.2)
        return reply

    return answer


def limits_report(url: str) -> dict:
    out = lw_here("fleet", "limits", "--db", url, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def released(workers: list, *names: str) -> dict | None:
    """The workers' log lines that handed back the loops ``names``, once there is one of each."""
    found = {e["loop"]: e for e in logged(workers, "released") if e["loop"] in names}
    return found if len(found) == len(names) else None


def beats(url: str) -> dict:
    out = lw_here("fleet", "workers", "--db", url, "--json")
    assert out.returncode == 0, out.stderr
    return {w["worker"]: w["beat_at"] for w in json.loads(out.stdout)}


def test_the_fleets_daily_budget_ends_running_loops_and_no_more_are_claimed(pg_url, remote, tmp_path):
    cap = 2 * ITERATION
    set_cap = lw("fleet", "limits", "--db", pg_url, "--max-dollars-per-day", str(cap))
    assert set_cap.returncode == 0 and "fleet: at most $0.75 a day" in set_cap.stdout, set_cap.stderr
    loops = (("apple", "apples"), ("banana", "bananas"), ("cherry", "cherries"))
    for name, word in loops:
        submit(pg_url, remote, name, f"count the {word}")
    workers: list = []
    # A loop's second iteration is answered once its first is recorded (a real model takes
    # longer than a boundary does).
    script = ByGoal({
        word: [fakeapi.text(f"{word}: iteration one.", usage=USAGE),
               after_boundary(workers, name, 1, fakeapi.text(f"{word}: iteration two.", usage=USAGE))]
        for name, word in loops
    })  # fmt: skip
    with fakeapi.ScriptedServer(default=script) as server:
        start = starter(pg_url, remote, server, tmp_path)
        workers += [start("w1"), start("w2")]
        try:
            ended = lambda: all_ended(pg_url, workers, "apple")  # noqa: E731
            wait_for(ended, "the first loop to end", within=300, every=0.5, proc=workers[0])
            # Each beat follows a look at the queue: two more of each, two more chances to claim.
            seen = beats(pg_url)
            wait_for(lambda: all(b >= seen[w] + 2 for w, b in beats(pg_url).items()),
                     "two more beats of each worker", within=60, every=0.2, proc=workers[0])  # fmt: skip
            left = [row_of(pg_url, n) for n in ("banana", "cherry")]
        finally:
            logs = [stop_worker(w) for w in workers]
        asked = [
            r for r in server.conversation_requests if "apples" not in json.dumps(r.body.get("messages"))
        ]
    report = limits_report(pg_url)
    # Nothing had a cost yet: apple ran alone until its first boundary, which held its second
    # iteration and found no room for a third, nor for another loop's first two: the cap, spent
    # exactly.
    assert report["spend"]["fleet"] == cap, (report, logs)
    assert report["limits"][0]["max_dollars_per_day"] == cap
    row = row_of(pg_url, "apple")
    assert row["outcome"] == "BUDGET_EXHAUSTED:fleet_dollars", (row, logs)
    assert row["reason"].startswith("the fleet's daily budget of $0.75 is spent ($"), row
    assert (row["iteration"], row["dollars"], row["generation"]) == (2, 2 * ITERATION, 1)
    # The others were never claimed: still queued, untouched, never sent to the model.
    for other in left:
        assert (other["status"], other["generation"], other["worker"]) == ("queued", 0, None), other
    assert asked == [] and {e["loop"] for e in logged(workers, "claimed")} == {"apple"}
    # The workers' logs say why: the first boundary found no room for another iteration, the
    # last one that the budget is spent, and the loop ended with the budget's reason.
    ahead = logged(workers, "budget", stop=False)
    assert len(ahead) == 1 and "would be passed by another iteration" in ahead[0]["reason"], logs
    assert [e["loop"] for e in logged(workers, "budget", stop=True)] == ["apple"]
    (end,) = logged(workers, "ended", outcome="BUDGET_EXHAUSTED:fleet_dollars")
    assert end["loop"] == "apple" and end["reason"].startswith("the fleet's daily budget of $0.75 is spent")
    shown = lw("fleet", "limits", "--db", pg_url).stdout
    assert "$0.75" in shown, shown


def priced(dollars: float) -> dict:
    """One request's usage costing ``dollars``, half in, half out (claude-sonnet-4-5)."""
    return {"input_tokens": round(dollars / 2 / 3e-6), "output_tokens": round(dollars / 2 / 15e-6),
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}  # fmt: skip


def no_loop_running(url: str, workers: list, names: tuple) -> bool:
    errors = logged(workers, "error")
    assert not errors, errors
    rows = [row_of(url, n) for n in names]
    return all(r.get("status") in ("ended", "queued") for r in rows) and any(
        r["status"] == "ended" for r in rows
    )


@pytest.mark.parametrize("cap, each", [(14.25, 1.5), (10.0, 3.0)])
def test_the_fleets_daily_cap_is_passed_by_at_most_one_iteration_in_all(pg_url, remote, tmp_path, cap, each):
    """Issue 26 item 6(b): three loops running at once, on two workers, each told at its own
    boundary, passed a cap by an iteration each and more ($19.50 of $14.25, $21 of $10). The
    room under the cap is held for the iterations each loop has begun or may begin, at claim
    and at every boundary: the spend stays within one iteration of the cap in all."""
    assert lw("fleet", "limits", "--db", pg_url, "--max-dollars-per-day", str(cap)).returncode == 0
    loops = (("gannet", "gannets"), ("puffin", "puffins"), ("skua", "skuas"))
    for name, word in loops:
        submit(pg_url, remote, name, f"count the {word}")
    workers: list = []
    # Each iteration is one request; the next one is answered once the last is recorded (a real
    # model takes longer than a boundary does).
    script = ByGoal({
        word: [fakeapi.text(f"{word}: 1.", usage=priced(each))]
        + [after_boundary(workers, name, n, fakeapi.text(f"{word}: {n + 1}.", usage=priced(each)))
           for n in range(1, 10)]
        for name, word in loops
    })  # fmt: skip
    names = tuple(name for name, _ in loops)
    with fakeapi.ScriptedServer(default=script) as server:
        start = starter(pg_url, remote, server, tmp_path)
        workers += [start("w1", "--slots", "2"), start("w2")]
        try:
            wait_for(lambda: no_loop_running(pg_url, workers, names), "every loop to end or wait",
                     within=600, every=0.5, proc=workers[0])  # fmt: skip
            seen = beats(pg_url)  # each beat follows a look at the queue: two more chances to claim
            wait_for(lambda: all(b >= seen[w] + 2 for w, b in beats(pg_url).items()),
                     "two more beats of each worker", within=60, every=0.2, proc=workers[0])  # fmt: skip
            rows = {n: row_of(pg_url, n) for n in names}
        finally:
            logs = [stop_worker(w) for w in workers]
    spent = limits_report(pg_url)["spend"]["fleet"]
    print(f"cap ${cap:.2f}, ${each:.2f} iterations: ${spent:.2f} spent")
    assert spent <= cap + each, (spent, rows, logs)
    assert spent == sum(r["dollars"] for r in rows.values()), rows
    for row in rows.values():
        assert row["status"] == "queued" or row["outcome"] == "BUDGET_EXHAUSTED:fleet_dollars", (row, logs)


def test_a_usage_limit_pauses_its_account_on_every_worker_until_the_reset(pg_url, remote, tmp_path):
    loops = [("kiwi-loop", "kiwi", "team-a"), ("mango-loop", "mango", "team-a")]
    loops.append(("plum-loop", "plum", "team-b"))
    for name, word, account in loops:
        submit(pg_url, remote, name, f"sort the {word} crates", "--account", account)
    paused = threading.Event()
    script: ByGoal

    def usage_limit(request):
        # The 429 comes once both other loops wait on the model: each is mid-iteration.
        wait_for(lambda: script.used["mango"] >= 2 and script.used["plum"] >= 1,
                 "the other loops to wait on the model", within=240, every=0.1)  # fmt: skip
        reset = int(time.time()) + 20
        return fakeapi.error(429, "rate_limit_error", f"Claude AI usage limit reached|{reset}")

    script = ByGoal({
        "kiwi": [fakeapi.text("kiwi: one crate."), usage_limit, fakeapi.text("kiwi: sorted." + DONE)],
        "mango": [fakeapi.text("mango: one crate."), fakeapi.hang(600),  # its client is killed first
                  fakeapi.text("mango: sorted." + DONE)],
        "plum": [fakeapi.hang(600, fakeapi.text("plum: one crate."), release=paused),
                 fakeapi.text("plum: sorted." + DONE)],
    })  # fmt: skip
    with fakeapi.ScriptedServer(default=script) as server:
        # Worker A only runs team-a's loops and claims first: kiwi (the oldest). The other takes
        # mango and plum, so that team-a has a loop on each machine.
        start = starter(pg_url, remote, server, tmp_path)
        only_a = start("wa", "--account", "team-a", env=NO_RETRIES)
        workers = [only_a]
        try:
            wait_for(lambda: row_of(pg_url, "kiwi-loop").get("worker") == "wa", "wa's claim", proc=only_a)
            workers.append(start("wb", "--slots", "2", env=NO_RETRIES))
            shown = lambda: lw_here("fleet", "limits", "--db", pg_url).stdout  # noqa: E731
            wait_for(lambda: "paused: account team-a until" in shown(), "team-a paused",
                     within=300, every=0.5, proc=only_a)  # fmt: skip
            pause = limits_report(pg_url)["pauses"]
            paused.set()
            handed = wait_for(lambda: released(workers, "kiwi-loop", "mango-loop"),
                              "team-a's loops handed back", within=120, every=0.2, proc=only_a)  # fmt: skip
            # Nothing of theirs runs on: no runner, and no client (in a session of its own) left
            # calling the model while the account waits.
            clones = [
                tmp_path / f"data-{w}" / "work" / n for w, n in (("wa", "kiwi-loop"), ("wb", "mango-loop"))
            ]
            wait_for(
                lambda: not any(working_in(clone) for clone in clones), "their processes gone", within=30
            )
            ended = lambda: all_ended(pg_url, workers, *(n for n, _, _ in loops))  # noqa: E731
            wait_for(ended, "every loop to end", within=300, every=0.5, proc=only_a)
        finally:
            paused.set()
            logs = [stop_worker(w) for w in workers]
    rows = {n: row_of(pg_url, n) for n, _, _ in loops}
    assert [(p["account"], p["set_by"]) for p in pause] == [("team-a", "wa")], (pause, logs)
    assert pause[0]["reason"].startswith("usage limit (HTTP 429): API Error: Request rejected (429)")
    until = pause[0]["until"]
    # Both handed back, each by its own worker, with a reason naming the pause and its reset.
    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until))
    assert (handed["kiwi-loop"]["worker"], handed["mango-loop"]["worker"]) == ("wa", "wb")
    why = f"account team-a is paused until {reset} (usage limit (HTTP 429)"
    assert all(line["reason"].startswith(why) for line in handed.values()), handed
    # team-b's loop went on through the pause: one claim, never handed back.
    plum = rows["plum-loop"]
    assert (plum["outcome"], plum["generation"], plum["iteration"]) == ("LOOP_DONE", 1, 2), (plum, logs)
    assert logged(workers, "released", loop="plum-loop") == []
    # team-a's loops were claimed again only after the reset, and went on where they were: the
    # iteration each had recorded counts, the one under way at the pause was done again.
    for name in ("kiwi-loop", "mango-loop"):
        row = rows[name]
        assert (row["outcome"], row["generation"], row["failovers"]) == ("LOOP_DONE", 2, 0), (row, logs)
        assert row["iteration"] == 2 and row["claimed_at"] >= until
    assert [e["worker"] for e in logged(workers, "account_paused", account="team-a")] == ["wa"]
    assert sorted(e["loop"] for e in logged(workers, "released")) == ["kiwi-loop", "mango-loop"]
    assert limits_report(pg_url)["pauses"] == []  # the pause ended at the reset
