"""`make demo`: one complete loopwright loop through the real Claude Code CLI.

A scripted, offline model (tests/fakeapi.py) plays the agent: in each of three
iterations it runs a real Bash command that appends to notes.md, and in the
third it ends with the completion sentinel. Everything else is real: Claude
Code 2.1.197 with this repository loaded as a plugin, the UserPromptSubmit hook
starting the loop, the Stop hook driving it, the state files on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))

import claude_cli  # noqa: E402
import fakeapi  # noqa: E402

GOAL = "Write three numbered notes to notes.md, one per iteration"


def main() -> int:
    claude_cli.claude_binary()
    work = Path(tempfile.mkdtemp(prefix="loopwright-demo-"))
    project, home = work / "project", work / "home"
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
    print(f"demo project: {project}\n")
    print(f'> /loopwright:loop "{GOAL}" --max-iterations 5 --completion-promise DONE\n')
    with fakeapi.ScriptedServer(script) as server:
        res = claude_cli.run_claude(
            f'/loopwright:loop "{GOAL}" --max-iterations 5 --completion-promise DONE',
            cwd=project,
            plugin_dir=REPO,
            server=server,
            home=home,
            env={"LOOPWRIGHT_PYTHON": sys.executable},
            timeout=300,
        )
        requests = server.conversation_requests
    if res.returncode != 0:
        print(res.describe())
        return 1

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
    for ev in res.hook_events("Stop", "hook_response"):
        out = (ev.get("stdout") or "").strip()
        if out:
            msg = json.loads(out).get("systemMessage", "")
            print(f"Stop hook: {msg}")
    print("\nnotes.md:")
    print(textwrap.indent((project / "notes.md").read_text(), "    "))
    status = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), "status"],
        capture_output=True,
        text=True,
        env={**os.environ, "LOOPWRIGHT_PYTHON": sys.executable},
    )
    print("$ loopwright status")
    print(textwrap.indent(status.stdout, "    "))
    report = project / ".loopwright" / "loops" / "prompt" / "report.md"
    print(f"{report.relative_to(project)}:")
    print(textwrap.indent(report.read_text(), "    "))
    ok = json.loads((report.parent / "loop.json").read_text())["outcome"] == "LOOP_DONE"
    print("demo finished: the loop ended LOOP_DONE after 3 iterations." if ok else "demo FAILED: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
