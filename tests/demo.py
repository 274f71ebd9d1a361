"""`make demo`: one complete loopwright loop through the real Claude Code CLI.

A scripted, offline model (tests/fakeapi.py) plays the agent: in each of three
iterations it runs a real Bash command that appends to notes.md, and in the
third it ends with the completion sentinel. Everything else is real: Claude
Code 2.1.197 with this repository loaded as a plugin, the UserPromptSubmit hook
starting the loop, the Stop hook driving it, the state files on disk.

Everything the demo makes lives in one temporary directory: the project, a HOME with its
own config (the key that signs the loop, so that `loopwright status` ends the demo showing
the loop as this user's), and a TMPDIR for Claude Code's own files. At the end, on Ctrl-C or
SIGTERM too, every process started with that HOME (the resident Stop server waits minutes
for another Stop) is stopped and the directory removed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))

import claude_cli  # noqa: E402
import fakeapi  # noqa: E402
from proctree import homed_under, kill_all  # noqa: E402

GOAL = "Write three numbered notes to notes.md, one per iteration"


def own_env(work: Path) -> dict[str, str]:
    """The demo's HOME, config, data, cache and temporary directories, all under ``work``: the
    session's hooks and the final `status` read the same key, and nothing is left elsewhere."""
    home = work / "home"
    dirs = {
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CACHE_HOME": home / ".cache",
        "TMPDIR": work / "tmp",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return {"LOOPWRIGHT_PYTHON": sys.executable, **{k: str(v) for k, v in dirs.items()}}


def play(work: Path) -> int:
    """The loop, its record and the final status; 0 when it ended LOOP_DONE and `status` shows
    it as this user's."""
    project, home, env = work / "project", work / "home", own_env(work)
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    script = [
        fakeapi.bash("echo '1. first note' >> notes.md", text="Starting: writing the first note."),
        fakeapi.text("Wrote note 1; two to go."),
        fakeapi.bash("echo '2. second note' >> notes.md", text="Iteration 2: writing the second note."),
        fakeapi.text("Wrote note 2; one to go."),
        fakeapi.bash(
            "echo '3. third note' >> notes.md && wc -l notes.md", text="Iteration 3: the last note."
        ),
        fakeapi.text("notes.md now holds all three notes.\n<promise>DONE</promise>"),
    ]
    hold = float(os.environ.get("DEMO_HOLD_SECONDS") or 0)
    if hold:  # tests/e2e/test_demo.py: the second iteration's model call waits, so a Ctrl-C finds it running
        script[2] = fakeapi.hang(hold, then=script[2])
    print(f"demo directory: {work}\ndemo project: {project}\n")
    print(f'> /loopwright:loop "{GOAL}" --max-iterations 5 --completion-promise DONE\n')
    with fakeapi.ScriptedServer(script) as server:
        res = claude_cli.run_claude(
            f'/loopwright:loop "{GOAL}" --max-iterations 5 --completion-promise DONE',
            cwd=project,
            plugin_dir=REPO,
            server=server,
            home=home,
            env=env,
            timeout=300,
        )
        requests = server.conversation_requests
    if res.returncode != 0:
        print(res.describe())
        return 1
    show_calls(requests)
    for ev in res.hook_events("Stop", "hook_response"):
        out = (ev.get("stdout") or "").strip()
        if out:
            print(f"Stop hook: {json.loads(out).get('systemMessage', '')}")
    print("\nnotes.md:")
    print(textwrap.indent((project / "notes.md").read_text(), "    "))
    report = project / ".loopwright" / "loops" / "prompt" / "report.md"
    print(f"{report.relative_to(project)}:")
    print(textwrap.indent(report.read_text(), "    "))
    done = json.loads((report.parent / "loop.json").read_text())["outcome"] == "LOOP_DONE"
    status = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), "status"],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(home), **env},
    )
    print("$ loopwright status")
    print(textwrap.indent(status.stdout + status.stderr, "    "))
    trusted = status.returncode == 0 and "prompt: ended LOOP_DONE" in status.stdout
    trusted = trusted and "UNTRUSTED" not in status.stdout
    if done and trusted:
        print("demo finished: the loop ended LOOP_DONE after 3 iterations.")
        return 0
    print("demo FAILED: " + ("see above" if done else "the loop did not end LOOP_DONE"))
    return 1


def show_calls(requests) -> None:
    for i, req in enumerate(requests, 1):
        last = req.last_user_text().strip()
        if "Stop hook feedback" in last or "[loopwright]" in last:
            first = next((ln for ln in last.splitlines() if "[loopwright]" in ln), last.splitlines()[0])
            print(f"model call {i}: next iteration handed over by the Stop hook:\n    {first.strip()}")
        elif "tool_result" in json.dumps(req.body["messages"][-1]):
            print(f"model call {i}: (tool result returned to the model)")
        else:
            print(f"model call {i}: the user's command, with loopwright's start note")
    print()


def clean_up(work: Path) -> None:
    """Every process started with the demo's HOME, then the demo's directory."""
    for _ in range(100):  # a SIGKILL takes a moment; a process may start another meanwhile
        left = homed_under(work)
        if not left:
            break
        kill_all(left)
        time.sleep(0.05)
    shutil.rmtree(work, ignore_errors=True)
    print(f"cleaned up: {work} removed, no process of the demo left")


def main() -> int:
    claude_cli.claude_binary()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # cleaned up as after Ctrl-C
    work = Path(tempfile.mkdtemp(prefix="loopwright-demo-"))
    try:
        return play(work)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        return 130
    finally:
        clean_up(work)


if __name__ == "__main__":
    sys.exit(main())
