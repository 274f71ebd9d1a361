"""The fleet's commands given bad input, through bin/loopwright as a process: each refusal is one
line with exit code 1 and no traceback, and nothing is queued; a goal full of SQL, shell and
terminal metacharacters is stored and shown as the text it is; a loop no worker would take is
queued with a warning that says why."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

import hostileurls
from conftest import REPO, lw_env, one_line_error, refused
from loopwright.registry import open_registry
from pgcluster import free_port
from waiting import wait_for

NASTY = "\x1b[31mfix it'; DROP TABLE fleet_loops; -- $(touch /tmp/lw-pwned) `id` && echo %s {now}"


def lw(tmp_path, *args, **env):
    return subprocess.run(
        [str(REPO / "bin" / "loopwright"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=lw_env(XDG_DATA_HOME=str(tmp_path / "data"), **env),
        timeout=120,
    )


def queued(url: str) -> list[dict]:
    reg = open_registry(url)
    try:
        return reg.fleet_loops()
    finally:
        reg.close()


@pytest.mark.parametrize(
    "repo, says",
    [
        ("--upload-pack=touch /tmp/x", "bad repository"),
        ("ext::sh -c touch% /tmp/x", "remote helper"),
        ("https://example.com/a/%2e%2e/b.git", "percent-encoding"),
        ("relative/path.git", "neither a URL nor an absolute path"),
        ("https://example.com/a b.git", "whitespace"),
        # Issue 26's three: curl ends the host at '?' or '#', so the host is not github.com.
        ("https://evil.example?@github.com/acme/x", "'?' or '#'"),
        ("https://127.0.0.1:8999#@github.com/acme/x", "'?' or '#'"),
        ("http://127.0.0.1:8999/?@github.com/acme/x", "'?' or '#'"),
    ],
)
def test_a_repository_no_worker_would_clone_is_refused_at_submit(registry_url, tmp_path, repo, says):
    line = one_line_error(lw(tmp_path, "submit", "--db", registry_url, "--repo", repo, "goal"))
    assert says in line
    assert queued(registry_url) == []


def test_submit_refuses_the_hostile_table_by_shape_and_queues_the_rest(tmp_path):
    """Issue 26's table through `submit` (click's runner): each URL refused by its shape is one
    line naming why; the others (a worker refuses them, or git does not follow the redirect)
    are queued, as submit cannot know a worker's allow-list or disk."""
    from click.testing import CliRunner

    from loopwright.cli.fleet import submit

    db = str(tmp_path / "runs.sqlite")
    for hostile in hostileurls.TABLE:
        url = hostileurls.render(hostile.url, port=8999, redirect=8998)
        out = CliRunner().invoke(submit, ["--db", db, "--repo", url, "goal"], catch_exceptions=False)
        if hostile.shape:
            line = refused(out)
            assert "bad repository" in line and hostile.says in line, (url, line)
        else:
            assert out.exit_code == 0, (url, out.output)
    kept = [hostileurls.render(h.url, port=8999, redirect=8998) for h in hostileurls.TABLE if not h.shape]
    assert sorted(r["repo"] for r in queued(db)) == sorted(kept)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--account", "team a"], "bad account name"),
        (["--account", "-x"], "bad account name"),
        (["--branch", "main..x"], "bad branch name"),
        (["--name", "no spaces"], "invalid loop name"),
        # Option names as the user typed them, not the spec's keys (issue 27 part 4).
        (["--max-iterations", "0"], "error: --max-iterations must be between 1 and"),
        (["--verify", "a\nb"], "error: --verify holds a NUL byte or a line break"),
        (["--judge-model", "a/b"], "error: --judge-model 'a/b' is not a plain model name"),
        (["--wrap-up-floor", "0.9"], "error: --wrap-up-floor must be a number between 0 and 0.5"),
        (["--judge-timeout", "0"], "error: --judge-timeout must be a number between 1 and 600"),
        (["--completion-promise", "a\nb"], "error: --completion-promise holds"),
        (["--max-iterations", "3", "--judge", "--", "work"], "error: --judge does not apply to a work loop"),
        (
            ["--completion-promise", "x", "--", "task", "auto", "x"],
            "error: --completion-promise does not apply",
        ),
        (["--", "work", "-h"], "'-h' is not an option of the work mode"),  # run would print its help
        ([w for i in range(33) for w in ("--tag", f"t{i}")], "at most 32 tags"),
        (["--tag", "t" * 65], "at most 64 characters"),
    ],
)
def test_bad_options_are_one_line_and_queue_nothing(registry_url, tmp_path, args, says):
    out = lw(tmp_path, "submit", "--db", registry_url, "--repo", "https://example.com/a.git", *args, "goal")
    assert says in one_line_error(out)
    assert queued(registry_url) == []


def test_a_goal_full_of_metacharacters_is_stored_and_shown_as_text(registry_url, tmp_path):
    out = lw(tmp_path, "submit", "--db", registry_url, "--repo", "https://example.com/a.git", "--name", "odd",
             "--", NASTY)  # fmt: skip
    assert out.returncode == 0, out.stderr
    (row,) = queued(registry_url)  # the table is still there, with the one row
    assert row["spec"]["goal"] == NASTY and row["name"] == "odd"
    shown = lw(tmp_path, "fleet", "ls", "--db", registry_url)
    assert shown.returncode == 0, shown.stderr
    assert "\\e[31mfix it'; DROP TABLE fleet_loops; -- $(touch /tmp/lw-p…" in shown.stdout  # its first 60
    assert "\x1b" not in shown.stdout  # a terminal escape is shown escaped, never sent
    listed = json.loads(lw(tmp_path, "fleet", "ls", "--db", registry_url, "--json").stdout)
    assert listed[0]["spec"]["goal"] == NASTY


def test_a_database_that_is_down_is_one_line_for_every_command(tmp_path):
    down = f"postgresql://lw:s3cret@127.0.0.1:{free_port()}/fleet"
    for args in (
        ["submit", "--db", down, "--repo", "https://example.com/a.git", "goal"],
        [
            "worker",
            "--db",
            down,
            "--allow-repo",
            "https://example.com/*",
            "--data",
            str(tmp_path / "w"),
            "--claude",
            sys.executable,
        ],
        ["fleet", "ls", "--db", down],
        ["fleet", "stop", "x", "--db", down],
        ["fleet", "limits", "--db", down],
    ):
        line = one_line_error(lw(tmp_path, *args))
        assert "cannot reach the database postgresql://lw:***@127.0.0.1" in line and "s3cret" not in line


def test_a_worker_needs_an_allow_list_and_a_heartbeat_inside_its_lease(registry_url, tmp_path):
    assert "give --allow-repo" in one_line_error(lw(tmp_path, "worker", "--db", registry_url))
    bad = lw(tmp_path, "worker", "--db", registry_url, "--allow-repo", "https://example.com/*",
             "--lease", "5", "--heartbeat", "5")  # fmt: skip
    assert "--heartbeat must be shorter than --lease" in one_line_error(bad)
    pattern = lw(tmp_path, "worker", "--db", registry_url, "--allow-repo", "https://example.com/a b")
    assert "--allow-repo" in one_line_error(pattern)
    verify = lw(tmp_path, "worker", "--db", registry_url, "--allow-repo", "https://example.com/*",
                "--allow-verify", "make\ntest")  # fmt: skip
    assert "--allow-verify: bad pattern 'make\\ntest'" in one_line_error(verify)


def beat(url: str, worker: str, account=None, **policy) -> None:
    """A worker's heartbeat as `loopwright worker` writes it, with what it accepts."""
    reg = open_registry(url)
    try:
        reg.worker_beat(worker, "alpha", 2, 0, account, [], **policy)
    finally:
        reg.close()


def test_a_loop_no_worker_would_take_is_queued_with_a_warning(registry_url, tmp_path):
    submit = ("submit", "--db", registry_url, "--repo", "https://example.com/a.git")
    alone = lw(tmp_path, *submit, "--name", "first", "goal")
    assert alone.returncode == 0 and "no live worker" in alone.stderr and "until one starts" in alone.stderr
    beat(registry_url, "w1", "team-a")
    other = lw(tmp_path, *submit, "--name", "second", "--account", "team-b", "goal")
    assert other.returncode == 0 and other.stderr.startswith(
        "loopwright: warning: no live worker runs account team-b"
    )
    served = lw(tmp_path, *submit, "--name", "third", "--account", "team-a", "goal")
    assert served.returncode == 0 and served.stderr == ""
    assert sorted(r["name"] for r in queued(registry_url)) == ["first", "second", "third"]


def test_a_repository_or_verify_no_live_worker_accepts_is_refused(registry_url, tmp_path):
    submit = ("submit", "--db", registry_url, "--repo", "https://example.com/acme/a.git")
    beat(registry_url, "w1", allow_repo=["https://example.com/acme/*"], allow_verify=[], lease=30)
    beat(
        registry_url, "w2", allow_repo=["https://example.com/other/*"], allow_verify=["make test*"], lease=30
    )
    far = lw(tmp_path, "submit", "--db", registry_url, "--repo", "https://example.com/far/x.git", "goal")
    assert one_line_error(far) == (
        "loopwright: error: no live worker accepts the repository https://example.com/far/x "
        "(2 live workers): start a worker with --allow-repo https://example.com/far/x"
    )
    # w2 would run the verify, but not on this repository; w1 takes the repository, runs no verify.
    checked = lw(tmp_path, *submit, "--verify", "make test -k api", "goal")
    assert one_line_error(checked) == (
        "loopwright: error: no live worker accepts this verify (2 live workers, 1 accepting the repository): "
        "start a worker with --allow-verify 'make test -k api'"
    )
    assert queued(registry_url) == []
    plain = lw(tmp_path, *submit, "--name", "plain", "goal")  # no verify: w1 takes it
    assert plain.returncode == 0 and plain.stderr == ""
    beat(registry_url, "w3", allow_repo=["https://example.com/acme/*"], allow_verify=["make test*"], lease=30)
    assert lw(tmp_path, *submit, "--name", "tested", "--verify", "make test -k api", "goal").returncode == 0
    assert sorted(r["name"] for r in queued(registry_url)) == ["plain", "tested"]


def test_workers_that_stopped_beating_are_not_asked(registry_url, tmp_path):
    beat(registry_url, "gone", allow_repo=["https://example.com/acme/*"], allow_verify=[], lease=5)
    reg = open_registry(registry_url)
    try:
        with reg.backend.tx() as tx:  # its last beat, 16 s ago: more than three of its 5 s leases
            tx.run("UPDATE fleet_workers SET beat_at = beat_at - 16")
    finally:
        reg.close()
    out = lw(tmp_path, "submit", "--db", registry_url, "--repo", "https://example.com/far/x.git",
             "--verify", "make", "goal")  # fmt: skip
    assert out.returncode == 0 and "warning: no live worker" in out.stderr  # queued for workers to come


def test_fleet_ls_says_why_a_queued_loop_waits(registry_url, tmp_path):
    submit = ("submit", "--db", registry_url, "--repo", "https://example.com/acme/a.git")
    for name, extra in (
        ("checked", ["--account", "a", "--verify", "make test"]),
        ("plain", ["--account", "a"]),
        ("theirs", ["--account", "b"]),
    ):
        assert lw(tmp_path, *submit, "--name", name, *extra, "goal").returncode == 0  # no worker yet
    listed = lw(tmp_path, "fleet", "ls", "--db", registry_url).stdout
    assert listed.count("waiting: no live worker ") == 3, listed
    beat(
        registry_url, "w1", "a", allow_repo=["https://example.com/acme/*"], allow_verify=["pytest*"], lease=30
    )
    lines = {
        line.split()[0]: line
        for line in lw(tmp_path, "fleet", "ls", "--db", registry_url).stdout.splitlines()
    }
    assert "waiting: no live worker accepts its verify" in lines["checked"]
    assert "waiting: no live worker runs account b" in lines["theirs"]
    assert "waiting" not in lines["plain"]
    rows = json.loads(lw(tmp_path, "fleet", "ls", "--db", registry_url, "--json").stdout)
    assert {r["name"]: r["waiting"] for r in rows} == {
        "checked": "no live worker accepts its verify",
        "plain": None,
        "theirs": "no live worker runs account b",
    }
    reg = open_registry(registry_url)
    try:  # the fleet's own limits hold loops back too, as the monitor's page says
        reg.pause_account("a", reg.limits_report()["now"] + 3600, "usage limit (429)", "w1")
    finally:
        reg.close()
    rows = json.loads(lw(tmp_path, "fleet", "ls", "--db", registry_url, "--json").stdout)
    assert {r["name"]: (r["waiting"] or "")[:28] for r in rows} == {
        "checked": "no live worker accepts its v",
        "plain": "account a is paused until 20",
        "theirs": "no live worker runs account ",
    }
    assert next(r["waiting"] for r in rows if r["name"] == "plain").endswith(" UTC: usage limit (429)")


def test_a_worker_that_said_it_stopped_is_not_asked(registry_url, tmp_path):
    beat(registry_url, "left", allow_repo=["https://example.com/acme/*"], allow_verify=[], lease=30)
    reg = open_registry(registry_url)
    try:
        reg.worker_stopped("left")  # as `loopwright worker` says at its exit
    finally:
        reg.close()
    out = lw(tmp_path, "submit", "--db", registry_url, "--repo", "https://example.com/far/x.git", "goal")
    assert out.returncode == 0 and "warning: no live worker" in out.stderr  # not refused by one gone


def test_a_worker_whose_claude_is_missing_exits_at_once_with_one_line(registry_url, tmp_path):
    """Not one claim made to fail: the worker checks --claude before it starts (exit code 2)."""
    base = (
        "worker",
        "--db",
        registry_url,
        "--allow-repo",
        "https://example.com/*",
        "--data",
        str(tmp_path / "w"),
    )
    for claude, env in (("/nonexistent/claude", {}), (str(tmp_path), {}), (None, {"PATH": str(tmp_path)})):
        out = lw(tmp_path, *base, *(["--claude", claude] if claude else []), **env)
        assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr, out.stderr
        (line,) = out.stderr.splitlines()
        assert line.startswith("loopwright: error: Claude Code's CLI (") and "--claude PATH" in line
    assert queued(registry_url) == [] and not (tmp_path / "w").exists()


def test_a_worker_with_a_bad_notifier_says_so_before_its_first_claim(registry_url, tmp_path):
    args = ("worker", "--db", registry_url, "--allow-repo", "https://example.com/*",
            "--data", str(tmp_path / "w"), "--claude", shutil.which("true"),
            "--notify", "desktop", "--notify", "pager:now")  # fmt: skip
    out = lw(tmp_path, *args)
    assert out.returncode == 1 and out.stdout == "", out.stderr
    assert out.stderr.splitlines() == [
        "loopwright: error: --notify 'pager:now': use desktop, webhook:https://..., slack:https://..."
        " or command:CMD"
    ]
    assert not (tmp_path / "w").exists()


def test_fleet_events_are_readable_lines_with_the_host_of_each(registry_url, tmp_path):
    cause = "API error 400 invalid_request: Prompt is too long"
    reg = open_registry(registry_url)
    try:
        loop = reg.submit(kind="prompt", spec={"goal": "g"}, repo="https://example.com/a.git", name="tl")
        reg.claim("w1", "host-a", lease=0.2)
        line = {"iteration": 1, "outcome": "continued", "tokens_in_this_iter": 2400, "gates": [],
                "tokens_out_this_iter": 600, "dollars_this_iter": 0.0167, "commit": "abc123"}  # fmt: skip
        reg.add_event(loop["id"], 1, "iteration", line)
        taken = wait_for(lambda: reg.claim("w2", "host-b", lease=30), "the failover", within=60)
        assert taken["generation"] == 2
        reg.record_error(loop["id"], 2, cause, "client_error", host="host-b", code=1)
        reg.release(loop["id"], 2, "the worker drains")
        reg.request("tl", "stop")
    finally:
        reg.close()
    out = lw(tmp_path, "fleet", "events", "tl", "--db", registry_url)
    assert out.returncode == 0, out.stderr
    said = out.stdout.splitlines()
    assert "{'" not in out.stdout and '{"' not in out.stdout
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  host-[ab] ", s) for s in said[:-1]), said
    words = [s.split(None, 4)[4] for s in said]
    assert words == [
        "claimed by w1",
        "iteration 1: continued · 3,000 tokens · $0.0167 · commit abc123",
        "failover: claimed by w2 after the lease of w1 on host-a ran out (failover 1)",
        f"client error (exit code 1): {cause}",
        "released by w2: the worker drains",
        "stop requested: ended at once (stopped from the fleet while no worker ran it)",
    ], said
    assert [s.split()[2] for s in said] == ["host-a", "host-a", "host-b", "host-b", "host-b", "host-b"]
    shown = lw(tmp_path, "fleet", "ls", "--db", registry_url)
    assert shown.returncode == 0 and f"last error: {cause}" in shown.stdout, shown.stdout
    assert (
        "STOPPED:user_stop" in shown.stdout
        and "stopped from the fleet while no worker ran it" in shown.stdout
    )
