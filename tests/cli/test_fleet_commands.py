"""The fleet's commands as a team uses them, through bin/loopwright as a process on SQLite and
PostgreSQL: a gate's answer checked and recorded, `loopwright stop` on a fleet loop, submit's
database and options, bulk stop and cancel with a count and a confirmation, `fleet ls` and
`fleet workers` as tables, and following a timeline to its end."""

from __future__ import annotations

import getpass
import json
import socket
import subprocess

from conftest import REPO, cli, lw_env, one_line_error
from loopwright.registry import open_registry
from proctree import SIGINT_DEFAULT

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
    """Queue a loop for a test to act on (through click's runner here: the commands under test
    run as processes)."""
    out = cli(tmp_path, "submit", "--db", url, "--repo", REPO_URL, "--name", name, *extra, "goal",
              env={"XDG_DATA_HOME": str(tmp_path / "data")})  # fmt: skip
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
    assert (row["status"], row["gate"]["answer"], row["gate"]["by"], row["gate"]["user"]) == (
        "queued", "continue", "cli", me,
    )  # fmt: skip
    assert [(e["kind"], e["data"]) for e in events if e["kind"] == "gate"] == [
        (
            "gate",
            {
                "gate": "budget-escalation",
                "question": "Continue?",
                "answer": "continue",
                "by": "cli",
                "user": me,
            },
        )
    ]
    shown = json.loads(lw(tmp_path, "fleet", "events", "gated", "--db", registry_url, "--json").stdout)
    assert shown[-1]["kind"] == "gate" and shown[-1]["data"]["user"] == me


def test_fleet_answer_raise_raises_the_ceilings_as_the_api_does(registry_url, tmp_path):
    """raise at the budget-escalation gate from the command line: by half as much again, or to
    the --max-* given; the new ceiling is in the loop's spec for its next worker."""
    gate = dict(BUDGET_GATE, dimensions=["dollars"])
    for name in ("half", "given"):
        submit(registry_url, tmp_path, name, "--max-dollars", "5", "--max-iterations", "10")
    fleet = Fleet(registry_url)
    try:
        for name in ("half", "given"):
            fleet.at_gate(name, gate)

        def answer(*args):
            return cli(tmp_path, "fleet", "answer", *args, "--db", registry_url)

        assert "the --max-* options go only with the answer raise" in one_line_error(
            answer("half", "continue", "--max-dollars", "9")
        )
        line = one_line_error(answer("half", "raise", "--max-iterations", "40"))
        assert "--max-iterations is not a ceiling this gate asks about: give --max-dollars" in line
        assert one_line_error(answer("half", "raise", "--max-dollars", "3")).startswith("loopwright: error: ")
        assert answer("half", "raise").stdout == (
            "half: answered 'raise' at gate budget-escalation (max-dollars $5.00 -> $7.50);"
            " queued again for a worker\n"
        )
        assert answer("given", "raise", "--max-dollars", "20").stdout.startswith(
            "given: answered 'raise' at gate budget-escalation (max-dollars $5.00 -> $20.00)"
        )
        rows = {n: fleet.reg.fleet_loop(n) for n in ("half", "given")}
    finally:
        fleet.close()
    assert rows["half"]["spec"]["limits"] == {"max_dollars": 7.5, "max_iterations": 10}
    assert rows["given"]["spec"]["limits"]["max_dollars"] == 20
    assert rows["given"]["gate"]["raised"] == {"max_dollars": [5, 20]} and rows["given"]["status"] == "queued"


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


# `run`'s options that are the worker's, not the loop's: what a worker runs and how it watches
# the client (--claude, --notify …), a session or loop on this machine (--loop, --session), the
# worker's own plumbing (--carry, --fleet-items), and the project's lower CLAUDE.md rates, which
# would let a row's repository lower what the fleet's dollar caps count.
RUN_ONLY = {
    "--loop", "--session", "--accept-project-rates", "--claude", "--claude-arg", "--plugin-dir",
    "--poll-seconds", "--stall-polls", "--quota-wait", "--notify", "--carry", "--fleet-items",
}  # fmt: skip


def test_submit_takes_every_option_of_run_that_is_the_loops():
    from loopwright.cli.fleet import submit as submit_command
    from loopwright.cli.run import run

    def options(command) -> set:
        return {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}

    assert options(run) - RUN_ONLY <= options(submit_command), (
        options(run) - RUN_ONLY - options(submit_command)
    )


def test_submit_queues_runs_options_and_names_the_database(registry_url, tmp_path):
    from loopwright.cli.run import run
    from loopwright.fleet.spec import runner_args
    from loopwright.registry.url import shown

    out = lw(tmp_path, "submit", "--db", registry_url, "--repo", REPO_URL, "--name", "opts",
             "--gates", "stop", "--judge", "--judge-model", "haiku", "--judge-timeout", "30",
             "--wrap-up-floor", "0.2", "--max-dollars", "4", "goal")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"queued fleet loop opts (prompt) into {shown(registry_url)}: {REPO_URL}")
    reg = open_registry(registry_url)
    try:
        row = reg.fleet_loop("opts")
    finally:
        reg.close()
    spec = row["spec"]
    assert (spec["gates"], spec["judge_model"], spec["judge_timeout"], spec["wrap_up_floor"]) == (
        "stop", "haiku", 30.0, 0.2,
    )  # fmt: skip
    # What the worker hands `loopwright run`, parsed by run itself.
    ctx = run.make_context("run", runner_args(row["kind"], spec))
    got = {
        k: ctx.params[k] for k in ("gate_policy", "judge_model", "judge_timeout", "wrap_up_floor", "judge")
    }
    assert got == {"gate_policy": "stop", "judge_model": "haiku", "judge_timeout": 30.0,
                   "wrap_up_floor": 0.2, "judge": True}  # fmt: skip
    assert ctx.params["prompt"] == ("goal",) and ctx.params["max_dollars"] == 4.0


def test_a_password_in_the_query_is_not_shown_either():
    from loopwright.registry.url import shown

    assert shown("postgresql://lw@db/x?sslmode=require&password=s3cret") == (
        "postgresql://lw@db/x?sslmode=require&password=***"
    )


def popen(tmp_path, *args, **env) -> subprocess.Popen:
    """A command left running, its output in a file of its own (read while it runs), with
    Ctrl-C's default meaning (a suite started in the background of a shell has SIGINT ignored,
    and its processes inherit that: no KeyboardInterrupt would reach the command)."""
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}.txt"
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(
            [*SIGINT_DEFAULT, str(REPO / "bin" / "loopwright"), *args],
            stdout=stdout, stderr=subprocess.DEVNULL, cwd=tmp_path,
            env=lw_env(XDG_DATA_HOME=str(tmp_path / "data"), **env),
        )  # fmt: skip
    proc.out = out
    return proc


def said(proc) -> str:
    return proc.out.read_text()


def test_submit_wait_follows_the_timeline_and_exits_as_run_does(registry_url, tmp_path):
    """A worker's part played through the registry: claim, an iteration, a gate (exit 5, as
    `run`'s waiting for you), then after the answer a budget's end (exit 2)."""
    from waiting import wait_for

    proc = popen(
        tmp_path, "submit", "--db", registry_url, "--repo", REPO_URL, "--name", "w", "--wait", "goal"
    )
    fleet = Fleet(registry_url)
    try:
        wait_for(lambda: fleet.reg.fleet_loop("w"), "the loop queued", proc=proc)
        row = fleet.reg.claim("w1", "host-a", lease=30)
        fleet.reg.progress(row["id"], 1, iteration=1, dollars=0.5)
        fleet.reg.add_event(row["id"], 1, "iteration", {"iteration": 1, "dollars": 0.5})
        wait_for(lambda: " iteration 1: " in said(proc), "the iteration printed", proc=proc)
        fleet.reg.progress(row["id"], 1, status="waiting_gate", gate=BUDGET_GATE)
        assert proc.wait(timeout=120) == 5
        assert "w: waits at gate budget-escalation: Continue? (answer with `loopwright fleet answer w " \
            "continue|raise|stop`)" in said(proc)  # fmt: skip
        fleet.reg.release(row["id"], 1, "waiting at gate budget-escalation")
        fleet.reg.answer_gate("w", "continue", "me@here")
        again = fleet.reg.claim("w1", "host-a", lease=30)
        follow = popen(tmp_path, "fleet", "events", "w", "--follow", "--db", registry_url)
        wait_for(lambda: " answered continue by " in said(follow), "the answer printed", proc=follow)
        fleet.reg.add_event(again["id"], 2, "iteration", {"iteration": 2})
        fleet.reg.finish(again["id"], 2, "MAX_ITERATIONS", "its 2 iterations are used")
        assert follow.wait(timeout=120) == 0
    finally:
        fleet.close()
    lines = said(follow).splitlines()
    marks = ("iteration 1:", "answered continue", "iteration 2:")  # among the claims and releases
    assert [m for line in lines[:-1] for m in marks if m in line] == list(marks)
    assert lines[-1] == "w: ended MAX_ITERATIONS after 1 iteration, $0.50 (its 2 iterations are used)"


def test_fleet_ls_is_a_table_with_ceilings_and_the_host_of_ended_loops(registry_url, tmp_path):
    empty = lw(tmp_path, "fleet", "ls", "--db", registry_url)
    assert empty.stdout.startswith("no fleet loops in ") and "nothing queued" in empty.stdout
    submit(registry_url, tmp_path, "done", "--max-dollars", "4", "--max-iterations", "9")
    submit(registry_url, tmp_path, "asks")
    submit(registry_url, tmp_path, "waiting-for-a-worker")
    fleet = Fleet(registry_url)
    try:
        row = fleet.reg.claim("w1", "host-a", lease=30)
        fleet.reg.progress(row["id"], 1, iteration=3, dollars=1.25)
        fleet.reg.finish(row["id"], 1, "LOOP_DONE", "done")
        fleet.at_gate("asks", dict(BUDGET_GATE, options=None))  # no options in the row: the gate's own
    finally:
        fleet.close()
    lines = lw(tmp_path, "fleet", "ls", "--db", registry_url).stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ITER", "SPEND", "HOST", "OUTCOME", "GOAL", "REPO", "CAUSE"]
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert by_name["done"].split()[:6] == ["done", "ended", "3/9", "$1.25/$4.00", "host-a", "LOOP_DONE"]
    assert by_name["waiting-for-a-worker"].split()[:5] == [
        "waiting-for-a-worker",
        "queued",
        "0/20",
        "$0.00/$25.00",
        "-",
    ]
    assert by_name["asks"].split()[5:9] == ["gate", "budget-escalation:", "answer", "continue|raise|stop"]
    starts = {lines[0].index(h) for h in ("STATUS", "HOST", "OUTCOME")}
    for line in lines[1:]:  # every column starts where its header does
        assert all(line[i - 2 : i] == "  " and line[i] != " " for i in starts), line
    assert (
        "no running fleet loops in "
        in lw(tmp_path, "fleet", "ls", "--status", "running", "--db", registry_url).stdout
    )


def test_fleet_workers_shows_each_workers_state(registry_url, tmp_path):
    reg = open_registry(registry_url)
    try:
        for name in ("w-alive", "w-stale", "w-gone"):
            reg.worker_beat(name, "host-a", 2, 0, None, [], lease=6)
        with reg.backend.tx() as tx:
            tx.run("UPDATE fleet_workers SET beat_at = beat_at - 60 WHERE worker = 'w-stale'")
        reg.worker_stopped("w-gone")
        reg.submit(kind="prompt", spec={"goal": "g"}, repo=REPO_URL, name="held-one")
        reg.claim("w-alive", "host-a")  # claimed since its last beat: the row says who holds it
    finally:
        reg.close()
    lines = lw(tmp_path, "fleet", "workers", "--db", registry_url).stdout.splitlines()
    assert lines[0].split() == ["WORKER", "STATE", "HOST", "SLOTS", "BEAT", "ACCOUNT", "LOOPS"]
    assert {line.split()[0]: (line.split()[1], line.split()[-1]) for line in lines[1:]} == {
        "w-alive": ("alive", "held-one"), "w-stale": ("stale", "-"), "w-gone": ("stopped", "-"),
    }  # fmt: skip
    listed = json.loads(lw(tmp_path, "fleet", "workers", "--db", registry_url, "--json").stdout)
    assert {w["worker"]: (w["state"], w["holds"]) for w in listed}["w-stale"] == ("stale", [])
    assert {w["worker"]: w["holds"] for w in listed}["w-alive"] == ["held-one"]


def test_stopped_workers_are_forgotten_on_request_and_live_ones_never(registry_url, tmp_path):
    """A worker's row stays after it leaves (`fleet workers` says it stopped); one restarted
    under a new name would leave rows for ever: --forget and --forget-stopped remove them."""
    reg = open_registry(registry_url)
    try:
        for name in ("w-alive", "w-stale", "w-left", "w-silent", "w-left-2"):
            reg.worker_beat(name, "host-a", 2, 0, None, [], lease=6)
        with reg.backend.tx() as tx:
            tx.run("UPDATE fleet_workers SET beat_at = beat_at - 60 WHERE worker = 'w-stale'")
            tx.run("UPDATE fleet_workers SET beat_at = beat_at - 700 WHERE worker = 'w-silent'")
        reg.worker_stopped("w-left")
        reg.worker_stopped("w-left-2")
    finally:
        reg.close()

    def forget(*args):
        return cli(tmp_path, "fleet", "workers", "--db", registry_url, *args)

    assert "worker w-stale has not stopped" in one_line_error(
        forget("--forget", "w-left", "--forget", "w-stale")
    )
    assert "no worker named 'w-nope'" in one_line_error(forget("--forget", "w-nope"))
    assert forget("--forget", "w-left").stdout == "forgot 1 stopped worker: w-left\n"
    assert forget("--forget-stopped").stdout == "forgot 2 stopped workers: w-left-2, w-silent\n"
    assert forget("--forget-stopped").stdout == "forgot 0 stopped workers\n"
    listed = json.loads(forget("--json").stdout)
    assert sorted(w["worker"] for w in listed) == ["w-alive", "w-stale"]


def test_fleet_ls_watch_without_a_terminal_prints_each_change(registry_url, tmp_path):
    import signal

    from waiting import wait_for

    submit(registry_url, tmp_path, "first")
    proc = popen(tmp_path, "fleet", "ls", "--watch", "0.2", "--db", registry_url)
    try:
        wait_for(lambda: "first" in said(proc), "the list", proc=proc)
        fleet = Fleet(registry_url)
        try:
            fleet.reg.claim("w1", "host-b", lease=30)
        finally:
            fleet.close()
        wait_for(lambda: "running" in said(proc), "the change", proc=proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    lines = said(proc).splitlines()
    assert lines[0].startswith("NAME") and len(lines) == 3, lines  # the header once, then each change
    assert lines[1].split()[:2] == ["first", "queued"] and lines[2].split()[:2] == ["first", "running"]
