"""Auto-backprop: a failing test run in this session's loop, noticed as it happens
(PostToolUseFailure on Bash), raises the flag that opens the next prompt with it."""

from __future__ import annotations

import time

from loopwright.core import jsoncodec
from loopwright.events.debuglog import debug
from loopwright.events.hookinput import HookInput
from loopwright.events.observe import project_rules
from loopwright.events.stop import find_loop
from loopwright.state import claudemd, journal, loops, store, verify
from loopwright.state import lock as locks
from loopwright.state.project import state_dir

TEST_RUNNER_PATTERN = (
    r"(^|[\s;&|(])(pytest|py\.test|tox|nox|jest|vitest|mocha|rspec|phpunit|ctest|"
    r"(python3?|uv run|poetry run) -m (pytest|unittest)|(npm|yarn|pnpm|bun)( run)? test|"
    r"npx (jest|vitest|mocha)|go test|cargo (test|nextest)|mvn( -\S+)* (test|verify)|"
    r"(\./)?gradlew? test|dotnet test|mix test|swift test|"
    r"make (test|check))\b"
)


def is_test_run(command: str, loop: dict) -> bool:
    import re  # only in the tool-failure hook, never on a Stop

    check = (loop.get("verify") or "").strip()
    return bool((check and check in command) or re.search(TEST_RUNNER_PATTERN, command))


def handle_tool_failure(raw: bytes) -> None:
    """PostToolUseFailure on Bash: inside this session's active loop, a failed test run
    raises the backprop flag so the next prompt opens with the failure."""
    try:
        data = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        return
    if (
        not isinstance(data, dict)
        or data.get("tool_name") != "Bash"
        or not isinstance(data.get("session_id"), str)
    ):
        return
    command = (
        (data.get("tool_input") or {}).get("command") if isinstance(data.get("tool_input"), dict) else None
    )
    error = data.get("error")
    if not isinstance(command, str) or not isinstance(error, str) or data.get("is_interrupt"):
        return
    state = state_dir(data.get("cwd") if isinstance(data.get("cwd"), str) else None)
    hook = HookInput({"session_id": data["session_id"], "cwd": data.get("cwd")})
    now = time.time()
    paths = find_loop(state, hook, now, [])
    if paths is None:
        return
    with loops.loop_mutex(paths):
        loop = loops.load_config(paths)
        if not loop or loop.get("status") != loops.ACTIVE or not is_test_run(command, loop):
            return
        rest = error[len("Exit code ") :] if error.startswith("Exit code ") else ""
        code = rest[: len(rest) - len(rest.lstrip("0123456789"))]  # the digits it starts with
        pending = {
            "source": "post-tool",
            "command": command,
            "exit_code": int(code) if code else None,
            "timed_out": False,
            "seconds": None,
            "output_tail": error[-verify.TAIL_CHARS :],
            "at": locks.now_iso(now),
        }
        store.write_json(paths.backprop_pending, claudemd.redact(pending, project_rules(loop).redactions))
    entry = {"event": "backprop", "source": "post-tool", "command": command}
    journal.write(paths, entry, session=hook.session_id, now=now)


def tool_failure_main(raw: bytes) -> int:
    try:
        handle_tool_failure(raw)
    except Exception as exc:  # never disturb the session over a side channel
        debug(state_dir(), f"tool-failure hook error: {exc!r}")
    return 0
