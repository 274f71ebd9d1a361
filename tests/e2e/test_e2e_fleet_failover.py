"""Leases and failover end to end: two workers on one PostgreSQL, as if on two machines (each its
own data directory, HOME, name and host), driving loops with the real Claude Code CLI against the
scripted Messages API and pushing to one bare repository. A worker killed mid-iteration loses
its loop to the other, which goes on with the counters carried and a handoff; a worker stopped
(SIGSTOP) past its lease comes back to find its claim gone and pushes nothing; the database
restarted mid-iteration costs nothing; a loop past its failovers ends STOPPED:failover_limit.

A scripted reply held with an Event marks "mid-iteration": the client has asked for the next
turn and waits. Every wait is on a condition."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

import fakeapi
from fleetkit import ByGoal, git, lw, lw_here, make_remote, start_worker, stop_worker, worker_log
from proctree import descendants, freeze, kill_tree, signal_each
from waiting import wait_for

pytestmark = pytest.mark.e2e

WITHIN = 240  # bound on any one wait: generous, the machine may be busy


@pytest.fixture
def remote(tmp_path) -> Path:
    bare = make_remote(tmp_path)
    git("--git-dir", str(bare), "config", "core.logAllRefUpdates", "always")  # a reflog of every push
    return bare


# --- machines ---------------------------------------------------------------------------------


class Machine:
    """A worker as if on a machine of its own; its commits carry its name as author."""

    def __init__(
        self, tag: str, url: str, remote: Path, tmp_path: Path, server, *extra: str, env=None
    ) -> None:
        self.name, self.host = f"worker-{tag}", f"host-{tag}"
        self.data, home = tmp_path / f"data-{tag}", tmp_path / f"home-{tag}"
        home.mkdir()
        (home / ".gitconfig").write_text(f"[user]\n\tname = {self.name}\n\temail = {tag}@example.invalid\n")
        self.proc = start_worker(
            url, remote, self.data, server, home, "--name", self.name, "--host", self.host, *extra, env=env
        )

    def log(self) -> str:
        return worker_log(self.proc)

    def events(self) -> list[dict]:
        out = []
        for line in self.log().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a library's warning on the same output
        return [e for e in out if isinstance(e, dict)]

    def budget(self, loop: str) -> dict:
        """The loop's counters in this machine's clone (what its runner has done locally)."""
        path = self.data / "work" / loop / ".loopwright" / "loops" / loop / "budget.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}


def kill(machine: Machine) -> None:
    """SIGKILL the worker and everything under it, their process groups included: a machine
    that died (nothing of it gets to say goodbye)."""
    kill_tree(machine.proc.pid)
    machine.proc.wait(timeout=60)


# --- the fleet as its CLI shows it ------------------------------------------------------------


def rows(url: str) -> dict[str, dict]:
    out = lw("fleet", "ls", "--db", url, "--json")
    assert out.returncode == 0, out.stderr
    return {r["name"]: r for r in json.loads(out.stdout)}


def row(url: str, name: str) -> dict:
    return rows(url).get(name, {})


def iteration_events(url: str, name: str) -> list[tuple[int, int]]:
    """(iteration, generation) of each iteration on the loop's timeline, in order."""
    out = lw("fleet", "events", name, "--db", url, "--json")
    assert out.returncode == 0, out.stderr
    return [
        (e["data"]["iteration"], e["generation"]) for e in json.loads(out.stdout) if e["kind"] == "iteration"
    ]


def submit(url: str, remote: Path, name: str, goal: str) -> None:
    out = lw_here("submit", "--db", url, "--repo", f"file://{remote}", "--name", name,
             "--completion-promise", "DONE", "--max-iterations", "8", goal)  # fmt: skip
    assert out.returncode == 0, out.stderr


def ended(url: str, name: str, machine: Machine) -> dict:
    return wait_for(lambda: (r := row(url, name)).get("status") == "ended" and r,
                    f"{name} to end", within=WITHIN, every=0.5, proc=machine.proc)  # fmt: skip


def claimed(url: str, name: str, machine: Machine) -> None:
    wait_for(lambda: row(url, name).get("worker") == machine.name, f"{machine.name} to claim {name}",
             within=WITHIN, every=0.5, proc=machine.proc)  # fmt: skip


def pushed_lines(remote: Path, name: str, path: str = "log.txt") -> list[str]:
    return git("--git-dir", str(remote), "show", f"loopwright/{name}:{path}").splitlines()


def pushes(remote: Path, name: str) -> list[tuple[str, str]]:
    """(commit, author) of every update of the loop's branch on the remote, oldest first."""
    out = git("--git-dir", str(remote), "log", "-g", "--format=%H %an", f"refs/heads/loopwright/{name}")
    return [tuple(line.split(" ", 1)) for line in reversed(out.splitlines())]


# --- scripts ----------------------------------------------------------------------------------


def step(word: str, last: bool = False) -> list:
    """One iteration: the agent appends ``word`` to log.txt, then ends its turn."""
    end = "All done.\n<promise>DONE</promise>" if last else f"Wrote {word}."
    return [fakeapi.bash(f"echo {word} >> log.txt"), fakeapi.text(end)]


def held(seen: threading.Event, then: fakeapi.Reply | None = None, release: threading.Event | None = None):
    """A reply that marks its request seen and is sent only once ``release`` is set (without
    one: never while the test runs)."""

    def reply(request):
        seen.set()
        return fakeapi.hang(WITHIN * 2, then=then or fakeapi.text("(late)"), release=release)

    return reply


class Fleet:
    """The test's machines (``start``) and held replies (``hold``)."""

    def __init__(self, url: str, remote: Path, tmp_path: Path) -> None:
        self.url, self.remote, self.tmp_path = url, remote, tmp_path
        self.machines: list[Machine] = []
        self.holds: list[threading.Event] = []

    def start(self, tag: str, server, *extra: str, env: dict | None = None) -> Machine:
        self.machines.append(Machine(tag, self.url, self.remote, self.tmp_path, server, *extra, env=env))
        return self.machines[-1]

    def hold(self) -> threading.Event:
        self.holds.append(threading.Event())
        return self.holds[-1]


@pytest.fixture
def fleet(pg_cluster, pg_url, remote, tmp_path):
    """At the end every held reply is let go and every machine stopped (woken first, with its
    database up: a test may have failed half-way)."""
    f = Fleet(pg_url, remote, tmp_path)
    yield f
    for event in f.holds:
        event.set()
    if not pg_cluster.running():
        pg_cluster.start()
    for machine in f.machines:
        if machine.proc.poll() is None:
            signal_each([machine.proc.pid, *descendants(machine.proc.pid)], signal.SIGCONT)
        stop_worker(machine.proc)


# --- the tests --------------------------------------------------------------------------------


def summary(r: dict) -> tuple:
    return r["outcome"], r["iteration"], r["generation"], r["failovers"]


def said(machine: Machine, event: str, **match) -> list[dict]:
    """The lines of the machine's log for ``event`` (with the fields of ``match``)."""
    return [e for e in machine.events() if e.get("event") == event and match.items() <= e.items()]


def test_three_loops_finish_spread_over_two_workers(pg_url, remote, fleet):
    loops = {"moth": "zebra", "wren": "okapi", "vole": "lynx"}  # name -> its goal's marker word
    both = fleet.hold()  # each loop's first turn waits until both workers hold a loop
    scripts = {
        marker: [held(threading.Event(), fakeapi.bash(f"echo {marker}-1 >> log.txt"), both),
                 fakeapi.text("First part written."), *step(f"{marker}-2", last=True)]
        for marker in loops.values()
    }  # fmt: skip
    for name, marker in loops.items():
        submit(pg_url, remote, name, f"keep the {marker} log")
    with fakeapi.ScriptedServer(default=ByGoal(scripts)) as server:
        # No failover wanted here: a lease that a busy machine cannot outlast by accident.
        a, b = fleet.start("a", server, "--lease", "30"), fleet.start("b", server, "--lease", "30")

        def each_holds_one() -> bool:
            running = [r for r in rows(pg_url).values() if r["status"] == "running"]
            return {r["worker"] for r in running} == {a.name, b.name}

        wait_for(each_holds_one, "each worker to hold a loop", within=WITHIN, every=0.5, proc=a.proc)
        both.set()
        done = {name: ended(pg_url, name, b) for name in loops}
        assert not server.exhausted_requests
    assert {r["host"] for r in done.values()} == {a.host, b.host}  # spread over both machines
    for name, marker in loops.items():
        assert summary(done[name]) == ("LOOP_DONE", 2, 1, 0), done[name]
        assert pushed_lines(remote, name) == [f"{marker}-1", f"{marker}-2"]
        assert iteration_events(pg_url, name) == [(1, 1), (2, 1)]


def test_a_killed_workers_loop_finishes_on_the_other_with_its_counters_and_a_handoff(pg_url, remote, fleet):
    asked = threading.Event()  # the loop's second iteration has begun on the first machine
    script = [*step("one"), held(asked), *step("two"), *step("three", last=True)]
    submit(pg_url, remote, "kestrel", "tend the ibex log")
    with fakeapi.ScriptedServer(default=ByGoal({"ibex": script})) as server:
        a = fleet.start("a", server)
        claimed(pg_url, "kestrel", a)
        b = fleet.start("b", server)
        wait_for(lambda: asked.is_set() and iteration_events(pg_url, "kestrel") == [(1, 1)],
                 "iteration 1 recorded and iteration 2 asked for", within=WITHIN, every=0.5)  # fmt: skip
        before = row(pg_url, "kestrel")
        kill(a)
        after = ended(pg_url, "kestrel", b)
        # Each session's opening prompt: the first message of every request it makes.
        openings = {fakeapi.last_user_text({"messages": r.body["messages"][:1]})
                    for r in server.conversation_requests}  # fmt: skip
    assert summary(after) == ("LOOP_DONE", 3, 2, 1), after  # one iteration on a, two more on b
    assert after["host"] == b.host and after["state"]["counters"]["iterations_used"] == 3
    assert after["dollars"] >= before["dollars"] > 0 and after["tokens"] > before["tokens"]
    assert after["minutes"] >= before["minutes"]
    assert len(openings) == 2, openings  # a's session, then b's
    (opening,) = [o for o in openings if '# Handoff: fleet loop "kestrel" goes on here' in o]
    assert "- iteration 1 (commit " in opening and "tend the ibex log" in opening
    assert pushed_lines(remote, "kestrel") == ["one", "two", "three"]  # every pushed iteration's work
    assert iteration_events(pg_url, "kestrel") == [(1, 1), (2, 2), (3, 2)]
    assert [(e["generation"], e["failovers"]) for e in said(b, "claimed")] == [(2, 1)]


# One model request's usage, priced exactly (claude-sonnet-4-5, $3 and $15 a million tokens in and
# out): $0.375, a binary fraction, so that sums compare exactly.
PRICED = {"input_tokens": 62_500, "output_tokens": 12_500, "cache_creation_input_tokens": 0,
          "cache_read_input_tokens": 0}  # fmt: skip
REQUEST_DOLLARS, REQUEST_TOKENS = 0.375, 75_000


def tip_record(remote: Path, name: str) -> dict:
    """The trailers of the loop branch's tip on the remote (its iteration's record)."""
    try:
        message = git("--git-dir", str(remote), "log", "-1", "--format=%B", f"refs/heads/loopwright/{name}")
    except Exception:  # not pushed yet
        return {}
    pairs = (line.partition(": ") for line in message.splitlines() if line.startswith("Loopwright-"))
    return {key: value for key, _, value in pairs}


def spend_today(url: str) -> float:
    out = lw("fleet", "limits", "--db", url, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["spend"].get("fleet", 0.0)


def test_a_worker_killed_between_its_push_and_its_record_loses_no_money(pg_url, remote, fleet, tmp_path):
    """Issue 26 item 6(a): a worker that pushed an iteration and died before recording it lost
    that iteration's tokens and dollars for good. Its commit carries the iteration's record; the
    next worker's claim records it, once, onto the row and the day's spend."""
    second, go, third = threading.Event(), fleet.hold(), threading.Event()
    u, done = PRICED, "All done.\n<promise>DONE</promise>"
    script = [
        fakeapi.bash("echo one >> log.txt", usage=u), fakeapi.text("Wrote one.", usage=u),
        held(second, fakeapi.bash("echo two >> log.txt", usage=u), go), fakeapi.text("Wrote two.", usage=u),
        held(third),  # a's runner asks for iteration 3 while its worker stands between push and record
        fakeapi.bash("echo three >> log.txt", usage=u), fakeapi.text(done, usage=u),
    ]  # fmt: skip
    pause = tmp_path / "pause-after-push"
    submit(pg_url, remote, "osprey", "tend the quail log")
    with fakeapi.ScriptedServer(default=ByGoal({"quail": script})) as server:
        a = fleet.start("a", server, env={"LOOPWRIGHT_TEST_PAUSE_AFTER_PUSH": str(pause)})
        claimed(pg_url, "osprey", a)
        wait_for(lambda: second.is_set() and row(pg_url, "osprey")["iteration"] == 1,
                 "iteration 1 recorded and iteration 2 asked for", within=WITHIN, every=0.5)  # fmt: skip
        pause.touch()  # a's next push lands; its worker then waits before recording it
        go.set()
        wait_for(lambda: third.is_set() and tip_record(remote, "osprey").get("Loopwright-Iteration") == "2",
                 "iteration 2 pushed and iteration 3 asked for", within=WITHIN, every=0.5)  # fmt: skip
        before = row(pg_url, "osprey")
        kill(a)
        b = fleet.start("b", server)
        after = ended(pg_url, "osprey", b)
    assert (before["iteration"], before["dollars"]) == (1, 2 * REQUEST_DOLLARS)  # iteration 2 never recorded
    assert summary(after) == ("LOOP_DONE", 3, 2, 1), after
    # Six requests answered in all (two an iteration), each counted once: on the row, on the
    # day's spend, and in the counters the loop ran on.
    assert (after["dollars"], after["tokens"]) == (6 * REQUEST_DOLLARS, 6 * REQUEST_TOKENS), after
    assert spend_today(pg_url) == 6 * REQUEST_DOLLARS
    assert after["state"]["counters"]["iterations_used"] == 3
    assert pushed_lines(remote, "osprey") == ["one", "two", "three"]
    (recovered,) = said(b, "recovered")
    assert (recovered["iterations"], recovered["dollars"]) == ([2], 2 * REQUEST_DOLLARS), recovered
    assert iteration_events(pg_url, "osprey") == [(1, 1), (2, 2), (3, 2)]
    assert tip_record(remote, "osprey")["Loopwright-Iteration"] == "3"


def test_a_worker_back_after_its_lease_ran_out_pushes_nothing(pg_url, remote, fleet):
    a_asked, a_next, a_go = threading.Event(), threading.Event(), fleet.hold()
    b_asked, b_go = threading.Event(), fleet.hold()
    # A model server each: what a asks after it comes back never takes a reply meant for b.
    a_script = [*step("one"), held(a_asked, fakeapi.bash("echo OLD >> log.txt"), a_go),
                fakeapi.text("Wrote OLD."), held(a_next)]  # fmt: skip
    b_script = [*step("two"), held(b_asked, fakeapi.bash("echo three >> log.txt"), b_go),
                fakeapi.text("All done.\n<promise>DONE</promise>")]  # fmt: skip
    submit(pg_url, remote, "heron", "tend the log")
    with fakeapi.ScriptedServer(a_script) as a_server, fakeapi.ScriptedServer(b_script) as b_server:
        a = fleet.start("a", a_server)
        claimed(pg_url, "heron", a)
        b = fleet.start("b", b_server)
        wait_for(lambda: a_asked.is_set() and row(pg_url, "heron")["iteration"] == 1, "a mid-iteration 2",
                 within=WITHIN, every=0.5)  # fmt: skip
        below = freeze(a.proc.pid)

        def b_pushed_one() -> bool:  # b took the loop once a's lease ran out, and pushed
            r = row(pg_url, "heron")
            return b_asked.is_set() and (r["generation"], r["iteration"]) == (2, 2)

        wait_for(b_pushed_one, "b to take over and push an iteration", within=WITHIN, every=0.5, proc=b.proc)
        # a's runner and client wake first and finish their iteration; then its worker wakes,
        # with an iteration to push.
        signal_each(below, signal.SIGCONT)
        a_go.set()
        wait_for(lambda: a_next.is_set() and a.budget("heron").get("iterations_used") == 2,
                 "a's runner to finish its iteration", within=WITHIN)  # fmt: skip
        os.kill(a.proc.pid, signal.SIGCONT)
        lost = wait_for(lambda: said(a, "lost"), "a to find its claim gone", within=WITHIN, proc=a.proc)
        b_go.set()
        after = ended(pg_url, "heron", b)
    assert "generation 1 no longer holds it" in lost[0]["reason"]  # the database's fence, before git's
    assert [e["iteration"] for e in said(a, "pushed")] == [1]
    assert (a.data / "work" / "heron" / "log.txt").read_text().split() == ["one", "OLD"]  # a had work
    history = pushes(remote, "heron")
    authors = [who for _, who in history]
    assert authors[0] == a.name and set(authors[1:]) == {b.name}, history  # nothing of a's after b's
    for commit, _ in history:
        assert "OLD" not in git("--git-dir", str(remote), "show", f"{commit}:log.txt")
    assert pushed_lines(remote, "heron") == ["one", "two", "three"]
    assert summary(after) == ("LOOP_DONE", 3, 2, 1), after


def sql(url: str, statement: str):
    """The first value of ``statement``'s first row, on the test's database; None while the
    server is down."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            row = conn.execute(statement).fetchone()
            return row[0] if row else None
    except psycopg.OperationalError:
        return None


# The workers' notification connections, as the server sees them.
LISTENERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
)
CLOCK = "SELECT extract(epoch from clock_timestamp())::double precision"


def test_a_database_restart_mid_iteration_loses_nothing(pg_cluster, pg_url, remote, fleet):
    asked, go = threading.Event(), fleet.hold()
    script = [*step("one"), held(asked, fakeapi.bash("echo two >> log.txt"), go), fakeapi.text("Wrote two."),
              *step("three", last=True)]  # fmt: skip
    submit(pg_url, remote, "tern", "tend the log")
    with fakeapi.ScriptedServer(script) as server:
        # A lease longer than the outage: the loop stays where it is, no failover.
        a = fleet.start("a", server, "--lease", "30")
        claimed(pg_url, "tern", a)
        b = fleet.start("b", server, "--lease", "30")
        wait_for(lambda: asked.is_set() and row(pg_url, "tern")["iteration"] == 1, "iteration 2 under way",
                 within=WITHIN, every=0.5)  # fmt: skip
        wait_for(lambda: sql(pg_url, LISTENERS) == 2, "both workers to listen", within=WITHIN, every=0.5)
        pg_cluster.stop()
        # The iteration ends while the database is away: its writes wait for it to come back.
        go.set()
        wait_for(lambda: a.budget("tern").get("iterations_used", 0) >= 2, "iteration 2 to end", within=WITHIN)
        failed = len(said(a, "database", loop="tern"))
        wait_for(lambda: len(said(a, "database", loop="tern")) > failed, "a write to fail", within=WITHIN)
        pg_cluster.start()
        back = sql(pg_url, CLOCK)
        after = ended(pg_url, "tern", a)
        wait_for(
            lambda: sql(pg_url, LISTENERS) == 2, "both workers to listen again", within=WITHIN, every=0.5
        )

        def beat_since_back() -> bool:
            out = json.loads(lw_here("fleet", "workers", "--db", pg_url, "--json").stdout)
            return {w["worker"] for w in out if w["beat_at"] > back} == {a.name, b.name}

        wait_for(beat_since_back, "both workers to beat again", within=WITHIN, every=0.5)
        assert not server.exhausted_requests
    assert summary(after) == ("LOOP_DONE", 3, 1, 0), after
    assert iteration_events(pg_url, "tern") == [(1, 1), (2, 1), (3, 1)]  # each iteration once
    assert pushed_lines(remote, "tern") == ["one", "two", "three"]


def test_a_loop_past_its_failovers_ends_failover_limit(pg_url, remote, fleet):
    submit(pg_url, remote, "petrel", "tend the log")
    # As after three failovers, its last worker gone too: the next claim ends it instead.
    sql(pg_url, "UPDATE fleet_loops SET status = 'running', worker = 'gone', host = 'far', generation = 4, "
                "failovers = 3, lease_expires = 0 WHERE name = 'petrel' RETURNING id")  # fmt: skip
    with fakeapi.ScriptedServer([]) as server:
        a = fleet.start("a", server)
        after = ended(pg_url, "petrel", a)
        assert server.conversation_requests == []  # nothing was started for it
    assert (after["outcome"], after["failovers"], after["worker"]) == ("STOPPED:failover_limit", 3, None)
    assert "at most 3" in after["reason"] and said(a, "claimed") == []
