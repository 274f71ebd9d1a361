"""The monitor's live page in real headless Chromium (Debian's chromium, driven by
Playwright): a run started in a terminal (`loopwright run ... --max-dollars 5`) shows up and
updates, its waiting gate is answered with a button, and the Stop button ends it; its
timeline and report are shown. Sign-in links survive link previews and `serve --login`
makes new ones; a loop signed by another key shows as untrusted, with none of its numbers."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

import claude_cli
import fakeapi
from conftest import KEY_HOME, REPO, hook_stop, lw_env

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
                page = browser.new_context().new_page()  # a context: the report opens in a tab of it
                page.goto(login)
                page.locator("#sign-in").click()  # the link's GET only shows this button
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
                assert runner.wait(timeout=60) == 4  # stopped: the exit-code table
                _timeline_and_report(page, row, project)
                # A second use of the login link opens nothing.
                other = browser.new_page()
                assert other.goto(login).status == 401
                browser.close()
        finally:
            monitor.terminate()
            monitor.wait(timeout=30)
    history = (project / ".loopwright/loops/prompt/history.jsonl").read_text().splitlines()
    answered = [g for line in history for g in json.loads(line).get("gates") or [] if g.get("answer")]
    assert answered and answered[0]["answer"] == "continue"


def _timeline_and_report(page, row, project) -> None:
    """The ended loop's timeline: one row per history line, newest first, the gate's answer
    in its row; its report opens as plain text."""
    from playwright.sync_api import expect

    history = [
        json.loads(x) for x in (project / ".loopwright/loops/prompt/history.jsonl").read_text().splitlines()
    ]
    row.locator("button.timeline").click()
    rows = page.locator("#tl-rows tr")
    expect(rows).to_have_count(len(history), timeout=30_000)
    expect(rows.first).to_have_attribute("data-iteration", str(history[-1]["iteration"]))
    answered = [h for h in history if any(g.get("answer") == "continue" for g in h.get("gates") or [])]
    gated = page.locator(f'#tl-rows tr[data-iteration="{answered[0]["iteration"]}"]')
    expect(gated.first).to_contain_text("budget-escalation=continue")
    expect(rows.first).to_contain_text(f"iteration {history[-1]['iteration']}/5")
    href = row.locator("a.report").get_attribute("href")
    report = page.context.new_page()  # the page's session, in a tab of its own
    res = report.goto(urllib.parse.urljoin(page.url, href))
    assert res.status == 200 and res.headers["content-type"].startswith("text/plain")
    assert res.text() == (project / ".loopwright/loops/prompt/report.md").read_text()
    report.close()


def _stop_file_written(project, within: float = 30.0) -> None:
    stop = project / ".loopwright" / "loops" / "prompt" / "stop"
    deadline = time.monotonic() + within
    while not stop.exists():
        assert time.monotonic() < deadline, "Stop wrote no stop file"
        time.sleep(0.1)


GOAL = 'Tidy <img src=x onerror="window.pwned=1"> the docs\nThen check every link & anchor.'


def _lw(project, *args: str, **env: str) -> subprocess.CompletedProcess:
    cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), *args]
    return subprocess.run(cmd, env=lw_env(**env), capture_output=True, text=True, timeout=120)


def _login_link(monitor: subprocess.Popen) -> str:
    for line in monitor.stdout:
        if "/login?code=" in line:
            return line.split("open ")[1].split(" ")[0]
    raise AssertionError("the monitor printed no sign-in link")


def _post_code(link: str) -> int:
    """The status of signing in with ``link``'s code, redirects not followed."""
    url = urllib.parse.urlsplit(link)
    code = urllib.parse.parse_qs(url.query)["code"][0]
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        body = urllib.parse.urlencode({"code": code})
        conn.request("POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_sign_in_links_untrusted_loops_goals_and_the_timeline(project, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    data = {"XDG_DATA_HOME": str(tmp_path / "data")}
    assert _lw(project, "start", "--session", "S1", "--name", "tidy", GOAL).returncode == 0
    for _ in range(2):
        hook_stop(project, message="working")
    (project / ".loopwright/loops/tidy/handoff.md").write_text("## Left\n<b>not bold</b>\n")
    foreign = _lw(
        project, "start", "--session", "S2", "--name", "foreign", "theirs", XDG_CONFIG_HOME=str(tmp_path)
    )
    assert foreign.returncode == 0, foreign.stderr  # signed by another key
    cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0"]
    monitor = subprocess.Popen(cmd, env=lw_env(**data), stdout=subprocess.PIPE, text=True)
    try:
        first = _login_link(monitor)
        for _ in range(2):  # a chat app's link preview, then another: neither uses the link up
            with urllib.request.urlopen(first, timeout=30) as res:
                assert res.status == 200 and "Sign in" in res.read().decode()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_context().new_page()
            page.goto(first)
            page.locator("#sign-in").click()
            _untrusted_row(page)
            tidy = page.locator('tr[data-loop="tidy"]')
            expect(tidy.locator("span.wrapup")).to_have_text("wrap-up on", timeout=30_000)
            _goal_and_handoff(page)
            _timeline_updates(page, project)

            minted = _lw(project, "serve", "--login", **data)  # while the monitor runs
            assert minted.returncode == 0, minted.stderr
            second = minted.stdout.split("open ")[1].split(" ")[0]
            fresh = browser.new_context().new_page()
            fresh.goto(second)
            fresh.locator("#sign-in").click()
            expect(fresh.locator('tr[data-loop="tidy"]')).to_be_visible(timeout=30_000)
            for used in (first, second):
                assert browser.new_context().new_page().goto(used).status == 401
                assert _post_code(used) == 401
            browser.close()
    finally:
        monitor.terminate()
        monitor.wait(timeout=30)
    gone = _lw(project, "serve", "--login", **data)
    assert gone.returncode != 0 and "no monitor" in gone.stderr


def _untrusted_row(page) -> None:
    """Its name and why; no numbers, no chart, no Stop."""
    from playwright.sync_api import expect

    row = page.locator('tr[data-loop="foreign"]')
    expect(row.locator("td.state")).to_have_text("untrusted", timeout=30_000)
    expect(row.locator("td.problem")).to_contain_text("signature does not match")
    for i in (3, 4, 5):
        expect(row.locator("td").nth(i)).to_have_text("")
    assert "undefined" not in row.inner_text() and row.locator("svg, button").count() == 0


def _goal_and_handoff(page) -> None:
    """The goal's first line, all of it on demand, as text; the handoff as plain text."""
    from playwright.sync_api import expect

    row = page.locator('tr[data-loop="tidy"]')
    summary = row.locator("details.goal summary")
    expect(summary).to_have_text(GOAL.splitlines()[0])
    expect(row.locator("details.goal pre")).to_be_hidden()
    summary.click()
    expect(row.locator("details.goal pre")).to_contain_text("Then check every link & anchor.")
    assert page.locator("img").count() == 0 and page.evaluate("window.pwned") is None
    expect(row.locator("a.report")).to_have_count(0)  # still running: no report yet
    handoff = page.context.new_page()
    res = handoff.goto(urllib.parse.urljoin(page.url, row.locator("a.handoff").get_attribute("href")))
    assert res.status == 200 and res.headers["content-type"].startswith("text/plain")
    assert res.text() == "## Left\n<b>not bold</b>\n" and handoff.locator("b").count() == 0
    handoff.close()


def _timeline_updates(page, project) -> None:
    """Newest first, each with its status line; an iteration that ends while it is open joins it."""
    from playwright.sync_api import expect

    page.locator('tr[data-loop="tidy"] button.timeline').click()
    rows = page.locator("#tl-rows tr")
    expect(rows).to_have_count(2, timeout=30_000)
    expect(rows.first).to_have_attribute("data-iteration", "2")
    expect(rows.first).to_contain_text("iteration 2/20")
    expect(rows.nth(1)).to_contain_text("continued")
    hook_stop(project, message="still working")
    expect(rows).to_have_count(3, timeout=30_000)
    expect(rows.first).to_have_attribute("data-iteration", "3")
