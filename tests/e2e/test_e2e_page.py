"""The monitor's live page in real headless Chromium (Debian's chromium, driven by
Playwright): a run started in a terminal (`loopwright run ... --max-dollars 5`) shows up and
updates, its waiting gate is answered with a button, and the Stop button ends it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time

import pytest

import claude_cli
import fakeapi
from conftest import KEY_HOME, REPO

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_the_page_shows_a_run_answers_its_gate_and_stops_it(project, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    env_extra = {
        "LOOPWRIGHT_PYTHON": sys.executable,
        "XDG_CONFIG_HOME": KEY_HOME,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PYTHONUNBUFFERED": "1",
    }
    # Iterations 1-4 answer at once; the budget gate waits after iteration 4 of 5, and the
    # fifth answer is held back until the gate is answered and Stop pressed.
    pressed = threading.Event()
    replies = [fakeapi.text(f"Iteration {i}.") for i in range(1, 5)]
    replies.append(fakeapi.hang(120, fakeapi.text("Iteration 5, at last."), release=pressed))
    with fakeapi.ScriptedServer(replies, default=fakeapi.text("More work.")) as server:
        cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0"]
        cmd += ["--claude", claude_cli.claude_binary(), "--claude-arg=--dangerously-skip-permissions"]
        env = claude_cli.offline_env(server.url, tmp_path / "home", env_extra)
        monitor = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        try:
            login = None
            for line in monitor.stdout:
                if "/login?code=" in line:
                    login = line.split("open ")[1].split(" ")[0]
                    break
            # The run is a terminal's `loopwright run`: the monitor watches it from the loop's files.
            run = [
                str(REPO / "bin" / "loopwright"),
                "-C",
                str(project),
                "run",
                "polish",
                "--max-iterations",
                "5",
            ]
            run += ["--claude", claude_cli.claude_binary(), "--claude-arg=--dangerously-skip-permissions"]
            run += ["--max-dollars", "5", "--json"]
            runner = subprocess.Popen(run, env=env, stdout=subprocess.PIPE, text=True)

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page()
                page.goto(login)
                row = page.locator('tr[data-loop="prompt"]')
                expect(row).to_be_visible(timeout=60_000)
                gate = row.locator('div.gate[data-gate="budget-escalation"]')
                expect(gate).to_be_visible(timeout=60_000)  # updated live: no reload
                expect(row.locator("td").nth(3)).to_have_text("5/5")
                gate.locator('button[data-answer="continue"]').click()
                expect(gate).to_have_count(0, timeout=30_000)
                row.locator("button.stop").click()
                expect(row.locator("td.state")).to_have_text("active")  # still in its turn
                _stop_file_written(project)
                pressed.set()
                expect(row.locator("td.state")).to_have_text("ended STOPPED:user_stop", timeout=60_000)
                # A second use of the login link opens nothing.
                other = browser.new_page()
                assert other.goto(login).status == 401
                browser.close()
            assert runner.wait(timeout=60) == 4  # stopped: the exit-code table
        finally:
            monitor.terminate()
            monitor.wait(timeout=30)
    history = (project / ".loopwright/loops/prompt/history.jsonl").read_text().splitlines()
    answered = [g for line in history for g in json.loads(line).get("gates") or [] if g.get("answer")]
    assert answered and answered[0]["answer"] == "continue"


def _stop_file_written(project, within: float = 30.0) -> None:
    stop = project / ".loopwright" / "loops" / "prompt" / "stop"
    deadline = time.monotonic() + within
    while not stop.exists():
        assert time.monotonic() < deadline, "Stop wrote no stop file"
        time.sleep(0.1)
