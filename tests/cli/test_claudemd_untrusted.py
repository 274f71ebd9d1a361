"""A repository's committed CLAUDE.md plays the attacker, through the real CLI and the real
Stop hook: its redaction patterns must not hang a Stop, and its rates must not switch the
dollar ceiling off or break the loop."""

import json
import subprocess
import sys

import pytest

from conftest import REPO, cli, hook_stop, lw_env

PROMPT = REPO / "hooks" / "prompt"
RATES = "### Loop Cost Rates\n| model | input | output | cache_write | cache_read |\n|---|---|---|---|---|\n"
SONNET_ZERO = "| claude-sonnet-4-5 | 0 | 0 | 0 | 0 |\n"
CLAIM = "All tests pass now.\n<promise>LOOP COMPLETE</promise>"


def lw(project, *args):
    return cli(project, *args)


def loop_dir(project, loop="prompt"):
    return project / ".loopwright" / "loops" / loop


def read(project, name):
    return json.loads((loop_dir(project) / name).read_text())


def status_json(project) -> dict:
    (s,) = json.loads(lw(project, "status", "--json").stdout)["loops"]
    return s


def usage_transcript(path, model: str, tokens_in: int, tokens_out: int, text: str = "hi"):
    """A transcript with one assistant message of ``model`` using these tokens."""
    message = {
        "id": f"m-{path.name}",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
    }
    line = {"type": "assistant", "timestamp": "2026-11-22T10:00:00.000Z", "message": message}
    path.write_text(json.dumps(line) + "\n")
    return path


# --- Finding 3: a catastrophic redaction pattern ----------------------------------------------


def test_a_catastrophic_redaction_pattern_does_not_hang_the_stop(project):
    (project / "CLAUDE.md").write_text(
        "# Project\n\n### Loop Logging\n"
        "- redact: `(\\S+)+QQQ`\n"  # exponential on Python's re for any long run of non-spaces
        "- redact: `sk-live-[a-z0-9]+`\n"
        "- redact: `(?<=token=)\\w+`\n"  # a lookbehind: RE2 refuses it
    )
    failing = "tests/test_api.py::test_rotating_the_api_token_refreshes_every_client[sk-live-abc123]"
    started = lw(project, "start", "--session", "S1", "--verify", f"echo FAILED {failing}; exit 1", "goal")
    assert started.returncode == 0, started.stderr
    assert "Note: CLAUDE.md:6: redaction pattern skipped: RE2 cannot run it" in started.stdout

    # Python's re would never finish on (\S+)+QQQ here; RE2 runs it in linear time. A hang shows
    # as hook_stop's process timeout (120 s, a bound on waiting, not a measure of speed).
    answer = hook_stop(project, message=CLAIM)
    assert answer["decision"] == "block" and "BACKPROP" in answer["reason"]
    assert "loopwright: CLAUDE.md:6: redaction pattern skipped" in answer["systemMessage"]
    # The good pattern still redacts, in the hook's own interpreter (python -I -S).
    log = (loop_dir(project) / "backprop-log.md").read_text()
    assert "test_rotating_the_api_token_refreshes_every_client[[REDACTED]]" in log
    for f in loop_dir(project).iterdir():
        if f.is_file() and f.name != "loop.json":  # loop.json holds the user's own --verify
            assert "sk-live-" not in f.read_text(errors="replace"), f.name
    text = lw(project, "status").stdout
    assert "CLAUDE.md:6: redaction pattern skipped: RE2 cannot run it" in text
    assert status_json(project)["project_rates"]["problems"][0].startswith("CLAUDE.md:6:")


def stop_imports(project, event: dict) -> set[str]:
    """The modules one Stop imports, in the interpreter the launcher starts (-I -S)."""
    cmd = [sys.executable, "-I", "-S", "-X", "importtime", str(REPO / "hooks" / "stop.py")]
    env = lw_env(CLAUDE_PROJECT_DIR=str(project))
    out = subprocess.run(cmd, input=json.dumps(event), capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return {ln.rsplit("|", 1)[1].strip() for ln in out.stderr.splitlines() if ln.startswith("import time:")}


def test_the_stop_imports_re2_only_for_a_project_with_patterns(project):
    (project / "CLAUDE.md").write_text(RATES + "| house-model | 1 | 1 | 1 | 1 |\n")
    lw(project, "start", "--session", "S1", "goal")
    event = {"session_id": "S1", "transcript_path": str(project / "none.jsonl"), "cwd": str(project)}
    first = stop_imports(project, dict(event, last_assistant_message="working"))
    assert "loopwright.state.claudemd" in first and "re2" not in first
    with open(project / "CLAUDE.md", "a") as fh:
        fh.write("\n### Loop Logging\n- redact: `sk-[a-z]+`\n")
    assert "re2" in stop_imports(project, dict(event, last_assistant_message="again"))


# --- Finding 7: rates from a committed CLAUDE.md ------------------------------------------------


def test_zero_rates_for_a_priced_model_do_not_switch_the_dollar_ceiling_off(project, tmp_path):
    (project / "CLAUDE.md").write_text(RATES + SONNET_ZERO + "| house-model | 0 | 0 | 0 | 0 |\n")
    out = lw(project, "start", "--session", "S1", "--max-dollars", "100", "goal")
    assert (
        "Note: CLAUDE.md prices claude-sonnet-4-5 below the built-in rates; they do not count: the dollar "
        "ceiling counts the built-in rates (start the loop with --accept-project-rates to count them)"
    ) in out.stdout
    assert "house-model" not in out.stdout  # a model the built-in table does not know: used as written
    t = usage_transcript(tmp_path / "t.jsonl", "claude-sonnet-4-5-20250929", 1_000_000, 1_000_000)
    hook_stop(project, transcript=t, message="hi")
    b = read(project, "budget.json")
    assert b["dollars_estimate"] == pytest.approx(3.0 + 15.0)  # the built-in list price
    assert "built-in rates count where they are higher, for claude-sonnet-4-5" in b["rate_table_source"]
    text = lw(project, "status").stdout
    assert "spend $18.00/$100.00" in text
    assert "CLAUDE.md prices claude-sonnet-4-5 below the built-in rates; they do not count" in text
    (low,) = status_json(project)["project_rates"]["lowered"]
    assert low["model"] == "claude-sonnet-4-5" and low["built_in"] == "claude-sonnet-4-5"
    assert low["counted"] is False and low["rates"]["input"] == 0.0


def test_the_dollar_ceiling_still_stops_a_loop_whose_claude_md_prices_it_at_zero(project, tmp_path):
    (project / "CLAUDE.md").write_text(RATES + SONNET_ZERO)
    lw(project, "start", "--session", "S1", "--max-dollars", "1", "goal")
    t = usage_transcript(tmp_path / "t.jsonl", "claude-sonnet-4-5", 2_000_000, 0)
    answer = hook_stop(project, transcript=t, message="hi")
    assert "decision" not in answer
    cfg = read(project, "loop.json")
    assert cfg["status"] == "ended" and cfg["outcome"] == "BUDGET_EXHAUSTED:dollars"


def test_confirmed_project_rates_count_and_a_later_change_does_not(project, tmp_path):
    (project / "CLAUDE.md").write_text(RATES + SONNET_ZERO)
    out = lw(project, "start", "--session", "S1", "--max-dollars", "1", "--accept-project-rates", "goal")
    assert "claude-sonnet-4-5 below the built-in rates; they count toward the dollar ceiling" in out.stdout
    zero = {"input": 0.0, "output": 0.0, "cache_write": 0.0, "cache_read": 0.0}
    assert read(project, "loop.json")["accepted_rates"] == {"claude-sonnet-4-5": zero}
    t = usage_transcript(tmp_path / "t.jsonl", "claude-sonnet-4-5", 2_000_000, 0)
    assert hook_stop(project, transcript=t, message="hi")["decision"] == "block"
    assert read(project, "budget.json")["dollars_estimate"] == 0.0
    assert "they count toward the dollar ceiling (confirmed" in lw(project, "status").stdout
    assert status_json(project)["project_rates"]["lowered"][0]["counted"] is True
    # A pull that changes the row is not what the user confirmed.
    (project / "CLAUDE.md").write_text(RATES + "| claude-sonnet-4-5 | 0.1 | 0 | 0 | 0 |\n")
    assert status_json(project)["project_rates"]["lowered"][0]["counted"] is False
    t2 = usage_transcript(tmp_path / "t2.jsonl", "claude-sonnet-4-5", 2_000_000, 0, text="more")
    hook_stop(project, transcript=t2, message="more")
    assert read(project, "loop.json")["outcome"] == "BUDGET_EXHAUSTED:dollars"


def test_the_slash_command_takes_the_confirmation(project):
    (project / "CLAUDE.md").write_text(RATES + SONNET_ZERO)
    payload = {
        "session_id": "S1",
        "cwd": str(project),
        "prompt": '/loopwright:loop "goal" --accept-project-rates',
    }
    out = subprocess.run(
        [str(PROMPT)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(project)),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    context = json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "they count toward the dollar ceiling (confirmed with --accept-project-rates)" in context
    assert "claude-sonnet-4-5" in read(project, "loop.json")["accepted_rates"]


@pytest.mark.parametrize("bad", ["1e308", "nan", "-1"])
def test_out_of_range_rates_are_refused_and_the_stop_does_not_fail(project, tmp_path, bad):
    (project / "CLAUDE.md").write_text(
        RATES
        + f"| claude-sonnet-4-5 | {bad} | {bad} | {bad} | {bad} |\n| house-model | 1 | {bad} | 1 | 1 |\n"
    )
    out = lw(project, "start", "--session", "S1", "goal")
    for line in (4, 5):
        note = f"CLAUDE.md:{line}: rates must be numbers from 0 to 1000 (dollars per million tokens); skipped"
        assert f"Note: {note}" in out.stdout
    # An iteration well inside the $25 ceiling (a dearer one would leave no room for the next).
    t = usage_transcript(tmp_path / "t.jsonl", "claude-sonnet-4-5", 100_000, 100_000)
    answer = hook_stop(project, transcript=t, message="hi")
    assert answer["decision"] == "block" and "internal error" not in answer["systemMessage"]
    assert "loopwright: CLAUDE.md:4: rates must be numbers from 0 to 1000" in answer["systemMessage"]
    b = read(project, "budget.json")
    assert b["dollars_estimate"] == pytest.approx(1.8) and b["rate_table_source"] == "built-in default"
    assert "CLAUDE.md:5: rates must be numbers" in lw(project, "status").stdout


def test_adopting_a_loop_does_not_adopt_the_rates_its_starter_confirmed(project):
    (project / "CLAUDE.md").write_text(RATES + SONNET_ZERO)
    lw(project, "start", "--accept-project-rates", "goal")
    cfg = read(project, "loop.json")
    (loop_dir(project) / "loop.json").write_text(json.dumps(dict(cfg, prompt="planted")))  # not signed by us
    shown = lw(project, "adopt", "prompt")
    assert "Confirmed CLAUDE.md rates (cleared on adoption): claude-sonnet-4-5" in shown.stdout
    digest = shown.stdout.split("Digest of what you just read: ")[1].split()[0]
    assert lw(project, "adopt", "prompt", "--yes", digest).returncode == 0
    assert "accepted_rates" not in read(project, "loop.json")
    assert status_json(project)["project_rates"]["lowered"][0]["counted"] is False
