"""Hostile and damaged state, as a user meets it: the Stop hook and the CLI run as
processes, JSON on stdin, answers on stdout/stderr, files on disk.

Every state file of a loop can hold the wrong types, be a symlink, a FIFO or a
device; paths in committed settings can point outside the project; text from the
agent or from files can carry terminal escape sequences. None of it may block a
session, hang a hook, crash a command, follow a link out of the project or reach
the user's terminal raw.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, lw_env
from loopwright.modes.task import taskdir
from loopwright.state import loops

CLI = REPO / "bin" / "loopwright"
STOP = REPO / "hooks" / "stop"
SESSION_START = REPO / "hooks" / "session-start"
TIMEOUT = 60  # an upper bound for one process on a busy machine, never a wait

HOSTILE = "a \x1b]52;c;SGVsbG8=\x07 b \x1b[2J c \u202e d"
RAW = ("\x1b", "\x07", "\u202e")
# What must never reach a terminal raw: C0 controls but newline, DEL, C1, bidi overrides.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


# --- helpers ----------------------------------------------------------------------------------------


def lw(project: Path, *args: str, stdin: str | None = None, timeout: float = TIMEOUT, cwd=None, **env: str):
    """bin/loopwright -C PROJECT ARGS as a process; text decoded as UTF-8."""
    return subprocess.run(
        [str(CLI), "-C", str(project), *args],
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        env=lw_env(**env),
        timeout=timeout,
        cwd=cwd,
    )


def start(project: Path, *args: str, session: str = "S1") -> None:
    res = lw(project, "start", "--session", session, *args, *([] if args else ["goal"]))
    assert res.returncode == 0, res.stderr


def event(project: Path, session: str = "S1", message: str = "working", transcript=None) -> dict:
    return {
        "session_id": session,
        "transcript_path": str(transcript or project / "none.jsonl"),
        "cwd": str(project),
        "hook_event_name": "Stop",
        "stop_hook_active": True,
        "last_assistant_message": message,
    }


def stop_hook(project: Path | None, payload, *, cwd=None, **env: str) -> dict | None:
    """The Stop hook launcher as Claude Code runs it. Fails the test if it hangs, exits
    non-zero, prints a traceback or prints anything but one JSON object."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    extra = dict(env)
    if project is not None:
        extra["CLAUDE_PROJECT_DIR"] = str(project)
    try:
        out = subprocess.run(
            [str(STOP)],
            check=False,
            input=data,
            capture_output=True,
            env=lw_env(**extra),
            timeout=TIMEOUT,
            cwd=cwd,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the Stop hook did not answer within {TIMEOUT} s (it hangs)")
    assert out.returncode == 0, out.stderr
    assert b"Traceback" not in out.stderr, out.stderr.decode(errors="replace")
    if not out.stdout.strip():
        return None
    answer = json.loads(out.stdout)
    assert isinstance(answer, dict), out.stdout
    return answer


def loop_dir(project: Path, name: str = "prompt") -> Path:
    return project / ".loopwright" / "loops" / name


def loop_json(project: Path, name: str = "prompt") -> dict:
    return json.loads((loop_dir(project, name) / "loop.json").read_text())


def history(project: Path, name: str = "prompt") -> list[str]:
    path = loop_dir(project, name) / "history.jsonl"
    return [ln for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def budget(project: Path, name: str = "prompt") -> dict:
    return json.loads((loop_dir(project, name) / "budget.json").read_text())


def files_of(directory: Path) -> dict[str, bytes | str]:
    """Every entry under ``directory``: regular files by content, symlinks by target."""
    out: dict[str, bytes | str] = {}
    for root, dirs, names in os.walk(directory):
        for n in dirs + names:
            p = Path(root) / n
            rel = str(p.relative_to(directory))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
            elif p.is_dir():
                out[rel] = "<dir>"
    return out


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def dead_pid() -> int:
    """A pid no process has here: 999999 unless that happens to run, else past pid_max."""
    if not pid_alive(999999):
        return 999999
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def assert_no_raw(text: str, what: str) -> None:
    for ch in RAW:
        assert ch not in text, f"{what} carries a raw {ch!r}: {text!r}"


def one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


# --- 1. wrong types and values in every state file ---------------------------------------------------


def _big(b):
    return dict(b, iterations_used=10**30)


BAD_STATE = [
    pytest.param("budget.json", lambda b: dict(b, iterations_used="x"), id="budget-iterations-string"),
    pytest.param("budget.json", lambda b: dict(b, iterations_used=-1), id="budget-iterations-negative"),
    pytest.param("budget.json", _big, id="budget-iterations-huge"),
    pytest.param("budget.json", lambda b: [b], id="budget-list"),
    pytest.param("budget.json", lambda b: dict(b, tokens_by_model=[]), id="budget-tokens-by-model-list"),
    pytest.param("loop.lock", lambda _: {"owner": 5}, id="lock-owner-int"),
    pytest.param("token-ledger.json", lambda _: {"sessions": []}, id="ledger-sessions-list"),
    pytest.param("backprop-pending.json", lambda _: {"exit_code": "x"}, id="backprop-exit-code-string"),
]


@pytest.mark.parametrize("name, make", BAD_STATE)
def test_a_state_file_of_the_wrong_shape_stops_the_loop_safely(project, name, make):
    start(project)
    assert stop_hook(project, event(project))["decision"] == "block"  # one good iteration: every file exists
    d = loop_dir(project)
    assert len(history(project)) == 1
    path = d / name
    current = json.loads(path.read_text()) if path.exists() else None
    bad = json.dumps(make(current))  # the standard library writes 10**30 exactly
    path.write_text(bad)

    answer = stop_hook(project, event(project))
    assert answer is not None and "decision" not in answer, answer
    assert list(answer) == ["systemMessage"], answer
    assert name in answer["systemMessage"], answer
    moved = list(d.glob(f"{name}.corrupt-*"))
    assert len(moved) == 1, sorted(p.name for p in d.iterdir())
    assert moved[0].read_text() == bad  # content preserved
    cfg = loop_json(project)
    assert cfg["status"] == "ended" and cfg["outcome"] == "STOPPED:corrupt-state", cfg
    assert len(history(project)) == 1  # the bad Stop counted no iteration
    assert not (project / ".loopwright" / "active" / "prompt").exists()
    assert stop_hook(project, event(project)) is None  # the loop is over


@pytest.mark.parametrize("content", ["[1]", '"stop"', '{"reason": 5}', "{torn"])
def test_a_stop_file_of_the_wrong_shape_is_a_stop_request(project, content):
    start(project)
    (loop_dir(project) / "stop").write_text(content)
    answer = stop_hook(project, event(project))
    assert answer is not None and "decision" not in answer, answer
    cfg = loop_json(project)
    assert cfg["status"] == "ended" and cfg["outcome"].startswith("STOPPED:"), cfg


def test_a_signed_loop_json_with_a_wrong_type_is_moved_aside_and_the_loop_stops(project):
    start(project)
    paths = loops.LoopPaths(project / ".loopwright", "prompt")
    cfg = json.loads(paths.config.read_text())
    loops.save_config(paths, dict(cfg, max_iterations="many"))  # signed, so ours, but wrong
    answer = stop_hook(project, event(project))
    assert answer is not None and "decision" not in answer, answer
    assert "loop.json" in answer["systemMessage"]
    moved = list(paths.dir.glob("loop.json.corrupt-*"))
    assert len(moved) == 1 and json.loads(moved[0].read_text())["max_iterations"] == "many"
    assert not paths.marker.exists()
    assert history(project) == []
    assert stop_hook(project, event(project)) is None


# --- 2. status never fails as a whole, and changes nothing --------------------------------------------


def _blocks(text: str) -> dict[str, str]:
    """status output split per loop: a block starts at an unindented 'name: ' line."""
    blocks: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            current = line.split(":", 1)[0]
            blocks[current] = line
        elif current:
            blocks[current] += "\n" + line
    return blocks


def test_status_shows_a_damaged_loop_next_to_a_healthy_one_and_moves_nothing(project):
    start(project, "goal one", session="S1")
    start(project, "goal two", session="S2")
    assert sorted(p.name for p in (project / ".loopwright" / "loops").iterdir()) == ["prompt", "prompt-2"]
    bad = loop_dir(project, "prompt") / "budget.json"
    bad.write_text(json.dumps(dict(budget(project), iterations_used="x")))
    before = files_of(project / ".loopwright")

    text = lw(project, "status")
    assert text.returncode == 0, text.stderr
    blocks = _blocks(text.stdout)
    assert "DAMAGED" in blocks["prompt"] and "budget.json" in blocks["prompt"], text.stdout
    assert "active" in blocks["prompt-2"].splitlines()[0] and "DAMAGED" not in blocks["prompt-2"], text.stdout

    as_json = lw(project, "status", "--json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    by_name = {s["name"]: s for s in data["loops"]}
    assert "budget.json" in (by_name["prompt"]["problem"] or ""), by_name["prompt"]
    assert by_name["prompt-2"]["status"] == "active" and not by_name["prompt-2"]["problem"], by_name[
        "prompt-2"
    ]
    assert any("budget.json" in p for p in data["problems"]), data["problems"]

    for one in ("prompt", "prompt-2"):
        res = lw(project, "status", one)
        assert res.returncode == 0, res.stderr

    assert files_of(project / ".loopwright") == before  # read-only: nothing moved aside, nothing written
    assert not list(bad.parent.glob("*.corrupt-*"))


# --- 3. bad lines in JSONL files are skipped, the good ones kept ---------------------------------------


def test_a_report_line_of_the_wrong_shape_is_skipped_and_the_good_one_counted(project):
    start(project)
    reports = loop_dir(project) / "reports.jsonl"
    reports.write_text(
        json.dumps({"outcome": "success", "comments": "many"})
        + "\n"
        + json.dumps({"outcome": "success", "comments": 3, "iteration": 1, "session": "S1"})
        + "\n"
    )
    answer = stop_hook(project, event(project))
    assert answer["decision"] == "block", answer
    assert "reports.jsonl" in answer["systemMessage"] and "skipped" in answer["systemMessage"], answer
    assert budget(project)["comments_pushed"] == 3


@pytest.mark.parametrize(
    "snapshot",
    [None, "x", [1, 2], {"iterations_used": "x", "tokens_in": -5}],
    ids=["control-no-bad-line", "string", "list", "wrong-counters"],
)
def test_resume_skips_a_last_history_line_with_a_bad_snapshot(project, snapshot):
    start(project)
    for _ in range(2):
        assert stop_hook(project, event(project))["decision"] == "block"
    d = loop_dir(project)
    good = json.loads(history(project)[-1])
    assert good["iteration"] == 2 and good["budget_snapshot"]["iterations_used"] == 2
    if snapshot is not None:
        with open(d / "history.jsonl", "a") as fh:
            fh.write(json.dumps(dict(good, iteration=3, budget_snapshot=snapshot)) + "\n")
    # Session S1 is gone, and with it its budget file and lock: counters come back from the history.
    (d / "budget.json").unlink()
    (d / "loop.lock").unlink()

    res = lw(project, "resume", "prompt", "--session", "S2")
    assert res.returncode == 0, res.stderr
    assert "history line 2" in res.stdout, res.stdout
    assert budget(project)["iterations_used"] == 2
    assert loop_json(project)["owner_session"] == "S2"
    answer = stop_hook(project, event(project, session="S2"))
    assert answer["decision"] == "block", answer
    assert budget(project)["iterations_used"] == 3


def test_task_lines_with_wrong_types_are_skipped_and_reported(project):
    state = project / ".loopwright"
    state.mkdir()
    lines = [
        {
            "id": "task-1",
            "type": "task",
            "text": "good task",
            "status": "open",
            "source": "manual",
            "created": "2026-01-01T00:00:00Z",
        },
        {
            "id": "task-2",
            "type": "task",
            "text": "created is a number",
            "status": "open",
            "source": "manual",
            "created": 5,
        },
        {
            "id": "task-3",
            "type": "task",
            "text": "depends_on is a string",
            "status": "open",
            "source": "manual",
            "created": "2026-01-01T00:00:01Z",
            "depends_on": "task-1",
        },
    ]
    (state / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    res = lw(project, "task", "list")
    assert res.returncode == 0, res.stderr
    assert "good task" in res.stdout
    assert "created is a number" not in res.stdout and "depends_on is a string" not in res.stdout
    assert "tasks.jsonl:2" in res.stderr and "tasks.jsonl:3" in res.stderr, res.stderr

    res = lw(project, "task", "list", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [t["id"] for t in data["open"]] == ["task-1"]
    assert len(data["problems"]) == 2, data["problems"]


# --- 4. tasks_file stays inside the project -------------------------------------------------------------


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_a_tasks_file_outside_the_project_is_refused(project, tmp_path, where):
    target = (
        (project / "../../.bashrc").resolve() if where == "relative" else tmp_path / "outside" / "tasks.jsonl"
    )
    value = "../../.bashrc" if where == "relative" else str(target)
    existed = target.exists()
    before = target.read_bytes() if existed else None
    lock_file = target.with_name(target.name + ".lock")
    lock_existed = lock_file.exists()
    (project / ".loopwright.json").write_text(json.dumps({"tasks_file": value}))

    res = lw(project, "task", "add", "x")
    assert res.returncode != 0
    assert "outside the project" in one_line(res)
    assert target.exists() == existed
    if existed:
        assert target.read_bytes() == before
    assert lock_file.exists() == lock_existed


@pytest.mark.parametrize("victim_exists", [True, False], ids=["victim-exists", "dangling"])
def test_a_committed_tasks_symlink_is_refused(project, tmp_path, victim_exists):
    victim = tmp_path / "victim"
    if victim_exists:
        victim.write_text("precious\n")
    state = project / ".loopwright"
    state.mkdir()
    (state / "tasks.jsonl").symlink_to(victim)

    res = lw(project, "task", "add", "x")
    assert res.returncode != 0
    assert "symlink" in one_line(res)
    if victim_exists:
        assert victim.read_text() == "precious\n"
    else:
        assert not victim.exists()
    assert (state / "tasks.jsonl").is_symlink()


def test_task_text_is_stored_verbatim_in_a_legitimate_tasks_file(project, tmp_path):
    (project / ".loopwright.json").write_text(json.dumps({"tasks_file": "notes/tasks.jsonl"}))
    text = f"run `touch {tmp_path}/pwned1` and $(touch {tmp_path}/pwned2) and 'quotes' \"too\""
    res = lw(project, "task", "add", text)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "task-1"
    entries = [json.loads(x) for x in (project / "notes" / "tasks.jsonl").read_text().splitlines()]
    assert [e["text"] for e in entries] == [text]
    assert not list(tmp_path.glob("pwned*"))


def test_an_absolute_tasks_file_from_the_environment_still_works(project, tmp_path):
    elsewhere = tmp_path / "elsewhere" / "tasks.jsonl"
    elsewhere.parent.mkdir()
    res = lw(project, "task", "add", "from the env", LOOPWRIGHT_TASKS_FILE=str(elsewhere))
    assert res.returncode == 0, res.stderr
    assert [json.loads(x)["text"] for x in elsewhere.read_text().splitlines()] == ["from the env"]
    listed = lw(project, "task", "list", "--json", LOOPWRIGHT_TASKS_FILE=str(elsewhere))
    assert listed.returncode == 0, listed.stderr
    assert [t["text"] for t in json.loads(listed.stdout)["open"]] == ["from the env"]


# --- 5. symlinks are never followed ---------------------------------------------------------------------


def test_start_refuses_a_symlinked_state_directory(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / ".loopwright").symlink_to(elsewhere)
    res = lw(project, "start", "--session", "S1", "goal")
    assert res.returncode != 0
    assert "symlink" in one_line(res)
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_state_directory_with_an_active_loop_behind_it_is_ignored(project, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    start(other)  # a real active loop, owned by S1, in another directory
    (project / ".loopwright").symlink_to(other / ".loopwright")
    before = files_of(other / ".loopwright")

    answer = stop_hook(project, event(project))
    assert answer is None or "decision" not in answer, answer

    status = lw(project, "status")
    assert status.returncode == 0, status.stderr
    assert "symlink" in status.stdout, status.stdout
    as_json = lw(project, "status", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert "symlink" in as_json.stdout
    doctor = lw(project, "doctor")
    assert "symlink" in doctor.stdout, doctor.stdout
    assert files_of(other / ".loopwright") == before


def test_a_budget_symlink_to_an_outside_file_is_moved_aside_and_the_loop_stops(project, tmp_path):
    start(project)
    assert stop_hook(project, event(project))["decision"] == "block"
    d = loop_dir(project)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(dict(budget(project), iterations_used=0)))
    before = outside.read_bytes()
    (d / "budget.json").unlink()
    (d / "budget.json").symlink_to(outside)

    answer = stop_hook(project, event(project))
    assert answer is not None and "decision" not in answer, answer
    assert "budget.json" in answer["systemMessage"]
    assert outside.read_bytes() == before
    moved = list(d.glob("budget.json.corrupt-*"))
    assert len(moved) == 1 and moved[0].is_symlink() and os.readlink(moved[0]) == str(outside)
    cfg = loop_json(project)
    assert cfg["status"] == "ended" and cfg["outcome"] == "STOPPED:corrupt-state", cfg
    assert len(history(project)) == 1
    assert outside.read_bytes() == before


@pytest.mark.parametrize("link", ["TASK", "TASK/m"])
def test_lifecycle_refuses_a_symlinked_task_directory(project, tmp_path, link):
    outside = tmp_path / "outside" / "TASK" / "m"
    outside.mkdir(parents=True)
    (outside / ".index.md").write_text(
        taskdir.render_index(taskdir.new_index("m", "outside module", [], False))
    )
    before = files_of(tmp_path / "outside")
    if link == "TASK":
        (project / "TASK").symlink_to(outside.parent)
    else:
        (project / "TASK").mkdir()
        (project / "TASK" / "m").symlink_to(outside)

    res = lw(project, "lifecycle", "status", "m")
    assert res.returncode != 0, res.stdout
    line = one_line(res)
    assert "symlink" in line or "outside" in line, line
    assert "draft" not in res.stdout
    assert files_of(tmp_path / "outside") == before


# --- 6. FIFOs and devices never hang a hook --------------------------------------------------------------


FIFO_FILES = [
    "progress.json",
    "stop",
    "budget.json",
    "loop.lock",
    "token-ledger.json",
    "backprop-pending.json",
    "reports.jsonl",
    "history.jsonl",
    "journal.jsonl",
    "tasks.jsonl",
    "loop.json",
    "cancelled",
    ".mutex",
]


@pytest.mark.parametrize("name", FIFO_FILES)
def test_a_state_file_replaced_by_a_fifo_never_hangs_the_hook(project, name):
    start(project)
    assert stop_hook(project, event(project))["decision"] == "block"
    path = loop_dir(project) / name
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    answer = stop_hook(project, event(project))  # fails the test if it does not answer in time
    if name == "stop":
        assert answer is not None and "decision" not in answer, answer
        assert loop_json(project)["outcome"].startswith("STOPPED:")
    if answer is not None:
        assert set(answer) <= {"decision", "reason", "systemMessage"}, answer
        assert "internal error" not in answer.get("systemMessage", ""), answer
    # Whatever the file, the loop is never wedged: the next Stop either continues it or it has ended.
    again = stop_hook(project, event(project))
    assert again is None or "internal error" not in again.get("systemMessage", ""), again
    if name in ("history.jsonl", "journal.jsonl"):
        assert again["decision"] == "block" and list(loop_dir(project).glob(f"{name}.corrupt-*"))
        assert loop_json(project)["status"] == "active"
    if name in ("token-ledger.json", "backprop-pending.json", "tasks.jsonl", "budget.json", "loop.lock"):
        assert loop_json(project)["outcome"] == "STOPPED:corrupt-state", name


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_transcript_that_is_a_fifo_or_a_device_counts_the_iteration_with_no_tokens(project, tmp_path, kind):
    start(project)
    if kind == "fifo":
        transcript = tmp_path / "transcript.jsonl"
        os.mkfifo(transcript)
    else:
        transcript = Path("/dev/zero")
    answer = stop_hook(project, event(project, transcript=transcript))
    assert answer is not None and answer.get("decision") == "block", answer
    b = budget(project)
    assert b["iterations_used"] == 1
    assert b["tokens_in"] == 0 and b["tokens_out"] == 0
    line = json.loads(history(project)[-1])
    assert line["tokens_in_this_iter"] == 0 and line["tokens_out_this_iter"] == 0


# --- 7. terminal safety ------------------------------------------------------------------------------------


def test_task_list_shows_escape_sequences_as_visible_text(project):
    res = lw(project, "task", "add", HOSTILE)
    assert res.returncode == 0, res.stderr
    listed = lw(project, "task", "list")
    assert listed.returncode == 0, listed.stderr
    assert_no_raw(listed.stdout + listed.stderr, "task list")
    assert "\\e]52;c;SGVsbG8=" in listed.stdout, listed.stdout
    as_json = lw(project, "task", "list", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert_no_raw(as_json.stdout, "task list --json")
    assert json.loads(as_json.stdout)["open"][0]["text"] == HOSTILE


def test_status_shows_a_hostile_stop_reason_without_escape_sequences(project):
    start(project)
    (loop_dir(project) / "stop").write_text(
        json.dumps({"reason": "bye \x1b]52;c;SGVsbG8=\x07 \x1b[2J \u202e x"})
    )
    answer = stop_hook(project, event(project))
    assert answer is not None and "decision" not in answer, answer
    for value in answer.values():
        if isinstance(value, str):
            assert_no_raw(value, "the Stop hook's answer")
    assert loop_json(project)["status"] == "ended"
    text = lw(project, "status")
    assert text.returncode == 0, text.stderr
    assert_no_raw(text.stdout, "status")
    assert "STOPPED:" in text.stdout
    as_json = lw(project, "status", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert_no_raw(as_json.stdout, "status --json")
    json.loads(as_json.stdout)


def test_the_stop_hook_answer_carries_no_escape_sequences(project):
    start(project, f"goal {HOSTILE}")
    answer = stop_hook(project, event(project, message=f"done {HOSTILE}"))
    assert answer is not None and answer["decision"] == "block", answer
    assert "SGVsbG8=" in answer["reason"]  # the goal is there, made visible
    for key in ("reason", "systemMessage"):
        assert_no_raw(answer[key], key)


def _statusline(project: Path, session: str = "S1"):
    try:
        stdin = json.dumps({"session_id": session, "cwd": str(project)})
        return subprocess.run(
            [str(CLI), "statusline"],
            check=False,
            input=stdin,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=lw_env(),
            timeout=TIMEOUT,
            cwd=str(project),
        )
    except subprocess.TimeoutExpired:
        pytest.fail("loopwright statusline hung")


def test_statusline_shows_hostile_progress_strings_without_control_characters(project):
    start(project)
    assert stop_hook(project, event(project))["decision"] == "block"
    progress = loop_dir(project) / "progress.json"
    p = json.loads(progress.read_text())
    p.update(pending_gates=["\x1b]52;c;SGVsbG8=\x07", "g\u202ex\x1b[2J"], last_reason=HOSTILE, mode="\x1b[2J")
    progress.write_text(json.dumps(p))
    res = _statusline(project)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    assert "waiting for" in lines[0], lines[0]  # the hostile strings were shown, escaped
    assert not CONTROL.search(lines[0]), repr(lines[0])


@pytest.mark.parametrize(
    "content",
    [
        "[1]",
        '"x"',
        "null",
        '{"iteration": "x"}',
        '{"max_iterations": "many"}',
        '{"pending_gates": "abc"}',
        '{"pending_gates": [5]}',
        '{"dollars_estimate": "NaN", "max_dollars": "x"}',
        '{"minutes_elapsed": []}',
        '{"paused": "yes"}',
        "{torn",
    ],
)
def test_statusline_never_crashes_on_progress_of_the_wrong_shape(project, content):
    start(project)
    assert stop_hook(project, event(project))["decision"] == "block"
    (loop_dir(project) / "progress.json").write_text(content)
    res = _statusline(project)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr
    assert len(res.stdout.splitlines()) <= 1, res.stdout
    assert not CONTROL.search(res.stdout.rstrip("\n")), repr(res.stdout)


# --- 8. a lock from the future
# -------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["other", "this"])
@pytest.mark.parametrize("mode", [None, "wait"])
def test_a_lock_with_a_heartbeat_from_the_future_and_a_dead_owner_is_taken_over(project, host, mode):
    start(project)
    lock = {
        "owner": "session:S1",
        "pid": dead_pid(),
        "pid_create_time": 1.0,
        "host": "far-away.invalid" if host == "other" else socket.gethostname(),
        "acquired_at": "2099-01-01T00:00:00Z",
        "heartbeat_at": "2099-01-01T00:00:00Z",
        "iteration": 1,
    }
    (loop_dir(project) / "loop.lock").write_text(json.dumps(lock))
    args = ["resume", "prompt", "--session", "S2"] + (["--lock", mode] if mode else [])
    try:
        res = lw(project, *args)
    except subprocess.TimeoutExpired:
        pytest.fail("resume waited on a lock that is stale")
    assert res.returncode == 0, res.stderr
    assert loop_json(project)["owner_session"] == "S2"
    assert json.loads((loop_dir(project) / "loop.lock").read_text())["owner"] == "session:S2"
    assert stop_hook(project, event(project, session="S2"))["decision"] == "block"


# --- 9. the SessionStart hook's env file
# ------------------------------------------------------------------------


def test_session_start_env_file_carries_a_hostile_data_path_verbatim(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env_file = tmp_path / "claude-env.sh"
    data = f"{tmp_path}/data 'it''s' $(touch X) `touch Y` \"$(touch {tmp_path}/Z)\" '$(touch W)' end\\"
    res = subprocess.run(
        [str(SESSION_START)],
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=str(work),
        env=lw_env(CLAUDE_PLUGIN_DATA=data, CLAUDE_ENV_FILE=str(env_file)),
    )
    assert res.returncode == 0, res.stderr
    assert env_file.exists()
    sourced = subprocess.run(
        ["sh", "-c", '. "$1" && printf %s "$LOOPWRIGHT_DATA"', "sh", str(env_file)],
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=str(work),
        env=lw_env(),
    )
    assert sourced.returncode == 0, sourced.stderr
    assert sourced.stdout == data
    assert sorted(p.name for p in work.iterdir()) == []  # no X, Y or W
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claude-env.sh", "work"]  # no Z, no data directory


# --- 10. a bad cwd without CLAUDE_PROJECT_DIR
# ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["long-name", "long-path", "file", "nul", "empty", "not-a-string"])
def test_the_stop_hook_survives_a_bad_cwd(tmp_path, kind):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("x")
    cwd = {
        "long-name": "/" + "a" * 5000,
        "long-path": "/a" * 2500,
        "file": str(afile),
        "nul": f"{tmp_path}/x\x00y",
        "empty": "",
        "not-a-string": 5,
    }[kind]
    payload = {
        "session_id": "S1",
        "transcript_path": str(tmp_path / "none.jsonl"),
        "cwd": cwd,
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": "hi",
    }
    raw = json.dumps(payload).encode()
    if kind == "nul":
        assert b"\\u0000" in raw
    answer = stop_hook(None, raw, cwd=str(scratch))
    assert answer is None or list(answer) == ["systemMessage"], answer
    assert not (scratch / ".loopwright").exists()


# --- 11. stale temp files
# ----------------------------------------------------------------------------------------


def test_a_stale_temp_file_is_removed_and_a_live_writers_is_kept(project):
    start(project)
    d = loop_dir(project)
    dead = dead_pid()
    stale = d / f".budget.json.tmp-{dead}-1"
    live = d / f".budget.json.tmp-{os.getpid()}-1"
    stale.write_text("{}")
    live.write_text("{}")
    assert stop_hook(project, event(project))["decision"] == "block"
    assert not stale.exists()
    assert live.exists()
