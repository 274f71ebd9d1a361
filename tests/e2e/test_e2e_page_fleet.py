"""The monitor's page for a fleet in real headless Chromium (Debian's chromium, driven by
Playwright), over `loopwright serve --db` on a real PostgreSQL: the Fleet section shows each loop
with its host, status, iteration, spend and goal (a goal full of HTML, SQL and shell shown as
text), the queue, a worker with its slots and heartbeat, the fleet's spend against its cap and an
account's pause; a worker's iteration arrives live (NOTIFY through the event stream), a loop's
timeline opens and grows, a waiting gate's button answers it, Stop and Cancel reach the database."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO, lw_env
from loopwright.registry import open_registry

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPO_URL = "https://example.com/acme/site.git"
GOAL = (
    'Tidy <img src=x onerror="window.pwned=1"> the docs\'; DROP TABLE fleet_loops; -- $(touch /tmp/pwned) '
    "`id` && echo {now} %s\nThen check every link & anchor."
)
GATE = {"name": "budget-escalation", "question": "Spend <b>more</b>?", "options": ["continue", "stop"]}


def _fleet(reg) -> dict:
    """A gated loop, a running one with spend, a queued one, a worker, a cap and a pause."""
    ids = {}
    for name, goal in (("gated", GOAL), ("busy", "polish the site")):
        reg.submit(kind="prompt", spec={"goal": goal}, repo=REPO_URL, name=name, account="acme")
        row = reg.claim("w-alpha", "alpha", lease=600)
        ids[name] = (row["id"], row["generation"])
    reg.progress(*ids["gated"], status="waiting_gate", gate=GATE)
    reg.release(*ids["gated"], "waiting at gate budget-escalation")
    # It goes on: it holds two more iterations at its mean cost, $0.625 each.
    reg.record_spend(*ids["busy"], 1.25, iteration=2, dollars=1.25, minutes=3.0, reserve=0.625)
    reg.submit(kind="prompt", spec={"goal": "later work"}, repo=REPO_URL, name="later")
    reg.worker_beat(
        "w-alpha", "alpha", 2, 2, "acme", [i for i, _ in ids.values()],
        allow_repo=["https://example.com/acme/*"], allow_verify=[], lease=600,
    )  # fmt: skip
    reg.set_limits("fleet", max_dollars_per_day=50)
    reg.pause_account("acme", reg.limits_report()["now"] + 3600, "usage limit (429)", "w-alpha")
    return ids


def _queue_from_the_form(page) -> None:
    """The form queues a loop as `loopwright submit` would, and says what the server refused (a
    repository no worker would clone, or one no live worker accepts)."""
    from playwright.sync_api import expect

    page.locator("#fleet-new summary").click()
    page.fill("#fs-repo", "--upload-pack=touch /tmp/pwned")
    page.fill("#fs-goal", "write the changelog")
    page.locator("#fleet-submit button[type=submit]").click()
    said = page.locator("#fleet-submitted")
    expect(said).to_contain_text("bad repository", timeout=30_000)
    page.fill("#fs-repo", "https://example.com/elsewhere/site.git")  # no live worker clones it
    page.locator("#fleet-submit button[type=submit]").click()
    expect(said).to_contain_text("no live worker accepts the repository", timeout=30_000)
    expect(said).to_contain_text("--allow-repo https://example.com/elsewhere/site")
    page.fill("#fs-repo", REPO_URL)
    page.fill("#fs-verify", "make test")  # the worker runs no verify (no --allow-verify)
    page.locator("#fleet-submit button[type=submit]").click()
    expect(said).to_contain_text("no live worker accepts this verify", timeout=30_000)
    expect(said).to_contain_text("--allow-verify 'make test'")
    page.fill("#fs-verify", "")
    page.fill("#fs-name", "changelog")
    page.fill("#fs-iter", "4")
    page.fill("#fs-tags", " docs, nightly ,")
    page.locator("#fleet-submit button[type=submit]").click()
    expect(said).to_have_text("queued changelog", timeout=30_000)
    row = page.locator('tr[data-fleet-loop="changelog"]')
    expect(row.locator("td.iteration")).to_have_text("0/4", timeout=30_000)
    expect(row.locator(".fleet-goal")).to_have_text("write the changelog")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_the_fleet_section_shows_loops_a_worker_and_answers_a_gate(pg_url, project, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    reg = open_registry(pg_url)
    ids = _fleet(reg)
    cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0", "--db", pg_url]
    monitor = subprocess.Popen(
        cmd, env=lw_env(XDG_DATA_HOME=str(tmp_path / "data")), stdout=subprocess.PIPE, text=True
    )
    try:
        login = next(line.split("open ")[1].split()[0] for line in monitor.stdout if "/login?code=" in line)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_context().new_page()
            page.goto(login)
            page.locator("#sign-in").click()
            expect(page.locator("#fleet")).to_be_visible(timeout=30_000)
            _rows_queue_spend_and_worker(page)
            _goal_as_text(page)
            _live_iteration_and_timeline(page, reg, ids["busy"])
            _queue_from_the_form(page)
            assert reg.fleet_loop("changelog")["tags"] == ["docs", "nightly"]
            gated = page.locator('tr[data-fleet-loop="gated"]')
            gated.locator('div.gate button[data-answer="continue"]').click()
            # queued again, on an account that is paused: stuck until the pause ends
            expect(gated.locator("td.status")).to_have_text("stuck", timeout=30_000)
            expect(gated.locator(".why-stuck")).to_contain_text("account acme is paused until")
            expect(gated.locator("div.gate")).to_have_count(0)
            page.locator('tr[data-fleet-loop="busy"] button.stop').click()
            busy = page.locator('tr[data-fleet-loop="busy"] td.status')
            expect(busy).to_have_text("running (stop asked)", timeout=30_000)
            later = page.locator('tr[data-fleet-loop="later"]')
            later.locator("button.cancel").click()
            later.locator("button.confirm-yes").click()
            expect(later.locator("td.status")).to_have_text("cancelled", timeout=30_000)
            expect(later.locator("button")).to_have_count(1)  # its timeline; no Stop or Cancel now
            browser.close()
    finally:
        monitor.terminate()
        monitor.wait(timeout=30)
    gate = reg.fleet_loop("gated")["gate"]
    assert (gate["answer"], gate["by"]) == ("continue", "page")
    assert reg.fleet_loop("busy")["control"] == "stop"
    reg.close()


def _rows_queue_spend_and_worker(page) -> None:
    from playwright.sync_api import expect

    gated = page.locator('tr[data-fleet-loop="gated"]')
    expect(gated.locator("td.host")).to_have_text("alpha")
    expect(gated.locator("td.status")).to_have_text("needs an answer")
    expect(gated.locator("div.gate .gate-q")).to_have_text("budget-escalation: Spend <b>more</b>?")
    busy = page.locator('tr[data-fleet-loop="busy"]')
    expect(busy.locator("td.iteration")).to_have_text("2")
    expect(busy.locator("td.spend")).to_have_text("$1.25")
    expect(page.locator('#fleet-status button[data-status="queued"] .n')).to_have_text("1")
    expect(page.locator('#fleet-status button[data-status="gate"] .n')).to_have_text("1")
    expect(page.locator("#fleet-spend")).to_contain_text("$1.25 of $50.00, $1.25 held by running loops")
    expect(page.locator('.pause[data-account="acme"]')).to_contain_text("usage limit (429)")
    worker = page.locator('li[data-worker="w-alpha"]')
    expect(worker).to_have_attribute("data-state", "alive")
    expect(worker.locator(".host")).to_have_text("alpha")
    expect(worker.locator(".slots")).to_have_text("2/2 slots")
    expect(worker.locator(".account")).to_have_text("account acme")
    expect(worker.locator(".beat")).to_contain_text("s ago")
    expect(worker.locator(".holds")).to_have_text("holds busy")


def _goal_as_text(page) -> None:
    """The goal's first line, all of it on demand: as text, never as markup."""
    from playwright.sync_api import expect

    goal = page.locator('tr[data-fleet-loop="gated"] details.fleet-goal')
    expect(goal.locator("summary")).to_have_text(GOAL.splitlines()[0])
    goal.locator("summary").click()
    expect(goal.locator("pre")).to_have_text(GOAL)
    assert page.locator("img, b").count() == 0 and page.evaluate("window.pwned") is None


def _live_iteration_and_timeline(page, reg, busy) -> None:
    """A worker's iteration reaches the open page by itself; the timeline opens and grows."""
    from playwright.sync_api import expect

    row = page.locator('tr[data-fleet-loop="busy"]')
    reg.add_event(*busy, "iteration", {"iteration": 3, "outcome": "continued", "dollars_this_iter": 0.25})
    reg.progress(*busy, iteration=3)
    expect(row.locator("td.iteration")).to_have_text("3", timeout=30_000)
    row.locator("button.timeline").click()
    rows = page.locator("#ftl-rows li[data-iteration]")  # the iterations (the claim's event is first)
    expect(rows).to_have_count(1, timeout=30_000)
    expect(rows.first).to_have_attribute("data-iteration", "3")
    expect(rows.first).to_contain_text("$0.2500")
    reg.add_event(*busy, "iteration", {"iteration": 4, "outcome": "<i>continued</i>"})
    expect(rows).to_have_count(2, timeout=30_000)
    expect(rows.nth(1)).to_contain_text("<i>continued</i>")
