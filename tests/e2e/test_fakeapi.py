"""Tests proving the fake Messages API + CLI harness work with the real CLI.

The ``e2e`` tests run the pinned Claude Code CLI (installed on first use by
``claude_cli.claude_binary()``, ~7 s, then cached under ``~/.cache``); each
run takes about 1-2 s.
"""

from __future__ import annotations

import json
import shutil
import textwrap
import urllib.request
from pathlib import Path

import pytest

try:  # tests/ as a package or as a plain directory on sys.path
    from tests import claude_cli, fakeapi
except ImportError:  # pragma: no cover
    import claude_cli  # type: ignore[no-redef]
    import fakeapi  # type: ignore[no-redef]


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def claude_bin() -> str:
    if (
        not shutil.which("npm")
        and not claude_cli._bin_path(claude_cli._install_dir(claude_cli.CLAUDE_CODE_VERSION)).exists()
    ):
        pytest.skip("npm not available to install Claude Code")
    return claude_cli.claude_binary()


def run(
    tmp_path: Path,
    server: fakeapi.ScriptedServer,
    prompt: str = "hello",
    plugin_dir: Path | None = None,
    **kw,
):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    res = claude_cli.run_claude(
        prompt, cwd=work, plugin_dir=plugin_dir, server=server, home=tmp_path / "home", timeout=90, **kw
    )
    assert res.returncode == 0, res.describe()
    assert not server.exhausted_requests, res.describe()
    return res


def make_plugin(root: Path, name: str, files: dict[str, str]) -> Path:
    (root / ".claude-plugin").mkdir(parents=True)
    (root / ".claude-plugin" / "plugin.json").write_text(json.dumps({"name": name, "version": "0.0.1"}))
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content))
    return root


# --------------------------------------------------------------------------
# server only (no CLI)
# --------------------------------------------------------------------------


def _post(url: str, body: dict) -> bytes:
    req = urllib.request.Request(
        url + "/v1/messages?beta=true",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read()


def test_server_streams_script_and_marks_exhaustion():
    tools = [{"name": "Bash", "input_schema": {"type": "object"}}]
    convo = {"model": "m", "stream": True, "tools": tools, "messages": [{"role": "user", "content": "hi"}]}
    with fakeapi.ScriptedServer(
        [
            fakeapi.bash("echo 1", text="pre", usage={"output_tokens": 42}),
            lambda req: "you said " + req.last_user_text(),
        ]
    ) as server:
        raw = _post(server.url, convo).decode()
        events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]
        assert [e["type"] for e in events][0] == "message_start"
        assert events[-2]["delta"]["stop_reason"] == "tool_use"
        assert events[-2]["usage"]["output_tokens"] == 42
        partial = "".join(
            e["delta"].get("partial_json", "") for e in events if e["type"] == "content_block_delta"
        )
        assert json.loads(partial) == {"command": "echo 1", "description": "Run a command"}

        helper = _post(server.url, {"model": "m", "messages": [{"role": "user", "content": "title?"}]})
        assert json.loads(helper)["content"][0]["text"] == fakeapi.HELPER_TEXT
        assert server.remaining == 1  # helper calls do not consume the script

        second = json.loads(_post(server.url, dict(convo, stream=False)))
        assert second["content"][0]["text"] == "you said hi"
        assert second["id"].startswith("msg_") and second["id"] != events[0]["message"]["id"]

        third = json.loads(_post(server.url, dict(convo, stream=False)))
        assert third["content"][0]["text"] == fakeapi.EXHAUSTED_TEXT
        assert len(server.exhausted_requests) == 1
        assert [r.is_helper for r in server.requests] == [False, True, False, False]


# --------------------------------------------------------------------------
# real CLI
# --------------------------------------------------------------------------


@pytest.mark.e2e
def test_plain_text_reply(tmp_path, claude_bin):
    usage = {
        "input_tokens": 101,
        "output_tokens": 17,
        "cache_creation_input_tokens": 11,
        "cache_read_input_tokens": 7,
    }
    with fakeapi.ScriptedServer([fakeapi.text("Hello from fakeapi", usage=usage)]) as server:
        res = run(tmp_path, server, prompt="say hello")

    assert res.result_text == "Hello from fakeapi"
    assert res.num_turns == 1
    assert server.remaining == 0
    assert len(server.conversation_requests) == 1
    assert server.conversation_requests[0].last_user_text().endswith("say hello")
    for key, value in usage.items():
        assert res.result["usage"][key] == value
    # the transcript records the reply with its id, model and final usage
    assistant = [e for e in res.transcript() if e.get("type") == "assistant"]
    assert assistant[0]["message"]["id"] == server.conversation_requests[0].reply.message_id
    assert assistant[0]["message"]["model"] == fakeapi.DEFAULT_MODEL
    assert assistant[0]["message"]["usage"]["output_tokens"] == 17


@pytest.mark.e2e
def test_bash_tool_use_really_runs(tmp_path, claude_bin):
    marker = tmp_path / "created-by-bash.txt"
    script = [
        fakeapi.bash(f"echo made > {marker} && echo wrote-it", text="Creating the file."),
        fakeapi.text("All done."),
    ]
    with fakeapi.ScriptedServer(script) as server:
        res = run(tmp_path, server)

    assert marker.read_text() == "made\n"
    assert res.result_text == "All done."
    assert res.num_turns == 2
    assert server.remaining == 0
    first, second = server.conversation_requests
    tool_use_id = first.reply.tool_use_ids[0]
    result_block = second.body["messages"][-1]["content"][0]
    assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == tool_use_id
    assert second.last_user_text() == "wrote-it"
    assert [b["content"] for b in res.tool_results] == ["wrote-it"]


STOP_HOOK = """\
import json, os, sys
data = json.load(sys.stdin)
log = os.environ["STOP_HOOK_LOG"]
with open(log, "a") as f:
    f.write(json.dumps(data) + "\\n")
calls = sum(1 for _ in open(log))
if calls == 1:
    print(json.dumps({"decision": "block", "reason": "Please also run the tests."}))
else:
    print("{}")
"""


@pytest.mark.e2e
def test_stop_hook_blocks_once(tmp_path, claude_bin):
    plugin = make_plugin(
        tmp_path / "plugin",
        "stopper",
        {
            "hooks/hooks.json": json.dumps(
                {
                    "hooks": {
                        "Stop": [
                            {
                                "hooks": [
                                    {
                                        "type": "command",
                                        "command": "python3 ${CLAUDE_PLUGIN_ROOT}/hooks/stop.py",
                                    }
                                ]
                            }
                        ]
                    }
                }
            ),
            "hooks/stop.py": STOP_HOOK,
        },
    )
    log = tmp_path / "stop-hook.jsonl"
    with fakeapi.ScriptedServer([fakeapi.text("First try."), fakeapi.text("Tests run.")]) as server:
        res = run(tmp_path, server, plugin_dir=plugin, env={"STOP_HOOK_LOG": str(log)})

    assert res.init["plugins"][0]["name"] == "stopper"
    assert server.remaining == 0
    assert len(server.conversation_requests) == 2
    feedback = server.conversation_requests[1].last_user_text()
    assert "Stop hook feedback" in feedback and "Please also run the tests." in feedback
    assert res.result_text == "Tests run."

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["stop_hook_active"] for c in calls] == [False, True]
    assert [c["last_assistant_message"] for c in calls] == ["First try.", "Tests run."]
    assert all(c["session_id"] == res.session_id and c["hook_event_name"] == "Stop" for c in calls)
    responses = res.hook_events("Stop", "hook_response")
    assert len(responses) == 2 and '"block"' in responses[0]["stdout"]


COMMAND = """\
---
description: Capture arguments through a quoted heredoc
argument-hint: <task>
---
```!
python3 ${CLAUDE_PLUGIN_ROOT}/scripts/capture.py <<'ARGS_${CLAUDE_SESSION_ID}'
$ARGUMENTS
ARGS_${CLAUDE_SESSION_ID}
```

Continue with the task above.
"""

CAPTURE = """\
import os, sys
data = sys.stdin.read()
with open(os.environ["CAPTURE_FILE"], "w") as f:
    f.write(data)
print("captured:" + os.environ["CLAUDE_CODE_SESSION_ID"])
"""


@pytest.mark.e2e
def test_slash_command_heredoc_passes_arguments_verbatim(tmp_path, claude_bin):
    plugin = make_plugin(
        tmp_path / "plugin", "cap", {"commands/start.md": COMMAND, "scripts/capture.py": CAPTURE}
    )
    pwned = tmp_path / "pwned"
    args = f"""say "hi" it's $(touch {pwned}) `touch {pwned}` ; echo x | cat $HOME\nsecond line"""
    capture = tmp_path / "captured.txt"
    with fakeapi.ScriptedServer([fakeapi.text("ok")]) as server:
        res = run(
            tmp_path,
            server,
            prompt="/cap:start " + args,
            plugin_dir=plugin,
            env={"CAPTURE_FILE": str(capture)},
        )

    assert capture.read_text() == args + "\n"
    assert not pwned.exists()
    prompt = server.conversation_requests[0].last_user_text()
    assert f"captured:{res.session_id}" in prompt  # command stdout is inlined
    assert "<command-name>/cap:start</command-name>" in prompt
