"""The monitor's page as an operator's page, in real headless Chromium (Debian's chromium, driven
by Playwright) over `loopwright serve --db` on a real PostgreSQL holding a fleet built through the
registry's API: 40 queued (10 on an account paused after a usage limit), 2 running on two hosts,
1 waiting at its budget gate, 1 failed with its cause, 1 stale worker.

At 1440x900 the first screen shows the gate, the failure with its cause and both running loops;
the attention strip's counts and the status, host, account and tag filters, the search box and
the pages each show what they say; at 390 px nothing scrolls sideways and every control is on
screen; "raise" asks for the new ceiling and checks it, and the ceiling given is the loop's;
Cancel asks first. With LOOPWRIGHT_PAGE_SHOTS=DIR the two widths' first screens are saved there
(docs/page-1440.png and docs/page-390.png come from `LOOPWRIGHT_PAGE_SHOTS=docs`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, lw_env
from loopwright.registry import open_registry

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPO_URL = "https://github.com/acme/site.git"
CAUSE = "the client exited (code 1): API error 400 invalid_request_error: prompt is too long"
QUESTION = "Approaching dollars ($4.10/$5.00). Continue, raise ceiling, or stop?"
GOALS = ["tidy the docs", "fix the flaky login test", "write the changelog", "bump the dependencies",
         "translate the README", "speed up the CI cache"]  # fmt: skip


def _submit(reg, name, goal, account="default", tags=()):
    spec = {"goal": goal, "limits": {"max_iterations": 10, "max_dollars": 5}}
    return reg.submit(kind="prompt", spec=spec, repo=REPO_URL, name=name, account=account, tags=list(tags))


def _claim(reg, name, worker, host, **progress):
    row = reg.claim(worker, host, lease=3600)
    assert row["name"] == name
    if progress:
        reg.progress(row["id"], row["generation"], **progress)
    return row


def build_fleet(reg) -> None:
    """The issue's fleet, through the registry as workers and `submit` write it."""
    _submit(reg, "gated", "speed up the build without dropping a test")
    gate = {"name": "budget-escalation", "question": QUESTION, "options": ["continue", "raise", "stop"],
            "dimensions": ["dollars"]}  # fmt: skip
    row = _claim(reg, "gated", "w-alpha", "alpha", iteration=7, dollars=4.1, minutes=21.0)
    reg.progress(row["id"], row["generation"], status="waiting_gate", gate=gate)
    reg.release(row["id"], row["generation"], "waiting at gate budget-escalation")
    _submit(reg, "broken", "upgrade the parser to the new grammar")
    row = _claim(reg, "broken", "w-beta", "beta", iteration=2, dollars=0.4, minutes=6.0)
    reg.finish(row["id"], row["generation"], "STOPPED:stall_limit", CAUSE)
    _submit(reg, "run-a", "split the billing module", tags=["billing"])
    _claim(reg, "run-a", "w-alpha", "alpha", iteration=3, dollars=1.2, minutes=9.5)
    _submit(reg, "run-b", "add dark mode to the settings page")
    _claim(reg, "run-b", "w-beta", "beta", iteration=1, dollars=0.3, minutes=2.0)
    for i in range(30):
        _submit(reg, f"q{i:02d}", GOALS[i % len(GOALS)] + f" (part {i})", tags=["docs"] if i < 6 else [])
    for i in range(10):
        _submit(reg, f"acme-{i}", f"migrate acme report {i}", account="acme")
    held = {r["name"]: r["id"] for r in reg.fleet_loops(status="running")}
    reg.worker_beat("w-alpha", "alpha", 1, 1, None, [held["run-a"]])
    reg.worker_beat("w-beta", "beta", 1, 1, None, [held["run-b"]])
    reg.worker_beat("w-gamma", "gamma", 2, 0, None, [])
    reg.worker_beat("w-delta", "delta", 1, 0, None, [])
    reg.worker_stopped("w-delta")  # it said it left (a drain): listed, stopped, not a worry
    with reg.backend.tx() as tx:  # gamma's last beat five minutes ago: it went quiet
        tx.run("UPDATE fleet_workers SET beat_at = beat_at - 300 WHERE worker = 'w-gamma'")
    reg.set_limits("fleet", max_dollars_per_day=100)
    reg.pause_account("acme", reg.limits_report()["now"] + 3600, "usage limit (429)", "w-alpha")


# Every control shown is within the width and not cut off by a box that hides what overflows it
# (an ellipsis hides a button whole), and one in sight has nothing over it.
OFF_SCREEN = """(width) => {
  const out = [];
  for (const e of document.querySelectorAll('button, input, select, textarea, summary')) {
    const r = e.getBoundingClientRect(), what = e.outerHTML.slice(0, 70);
    if (!e.getClientRects().length || !r.width) continue;  // not shown
    if (r.left < 0 || r.right > width) out.push(`${what} at ${r.left}-${r.right}`);
    for (let a = e.parentElement; a; a = a.parentElement) {
      const box = a.getBoundingClientRect();
      if (getComputedStyle(a).overflowX !== 'visible' && (r.left < box.left - 1 || r.right > box.right + 1))
        out.push(`${what} is cut off by ${a.tagName}.${a.className}`);
    }
    const x = (r.left + r.right) / 2, y = (r.top + r.bottom) / 2;
    const seen = y > 0 && y < innerHeight;
    if (seen && !e.contains(document.elementFromPoint(x, y))) out.push(`${what} is covered`);
  }
  return out;
}"""


def _on_screen(page, locator, width, height) -> None:
    box = locator.bounding_box()
    assert box is not None, locator
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, (locator, box)
    assert box["y"] >= 0 and box["y"] + box["height"] <= height, (locator, box)


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_the_operators_page_puts_what_needs_them_first(pg_url, project, tmp_path):
    from playwright.sync_api import sync_playwright

    reg = open_registry(pg_url)
    build_fleet(reg)
    shots = Path(os.environ.get("LOOPWRIGHT_PAGE_SHOTS") or tmp_path)
    cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0", "--db", pg_url]
    monitor = subprocess.Popen(
        cmd, env=lw_env(XDG_DATA_HOME=str(tmp_path / "data")), stdout=subprocess.PIPE, text=True
    )
    try:
        login = next(line.split("open ")[1].split()[0] for line in monitor.stdout if "/login?code=" in line)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
            page.goto(login)
            page.locator("#sign-in").click()
            _first_screen(page, shots)
            _filters(page)
            page.set_viewport_size({"width": 390, "height": 844})
            _narrow(page, shots)
            _raise(page, reg)
            _cancel(page, reg)
            browser.close()
    finally:
        monitor.terminate()
        monitor.wait(timeout=30)
    reg.close()


def _first_screen(page, shots: Path) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#fleet-loops tr")).to_have_count(30, timeout=30_000)  # a page of rows
    strip = page.locator("#attention")
    expect(strip.locator(".att-gates")).to_have_text("1 gate waits for you")
    expect(strip.locator(".att-failed")).to_have_text("1 loop failed")
    expect(strip.locator(".att-stuck .att-n")).to_have_text("10 loops stuck in the queue")
    expect(strip.locator(".att-stuck .att-why")).to_contain_text("account acme is paused until")
    expect(strip.locator(".att-workers")).to_have_text("1 worker went quiet")
    expect(page.locator('li[data-worker="w-gamma"]')).to_have_attribute("data-state", "stale")
    expect(page.locator('li[data-worker="w-alpha"] .holds')).to_have_text("holds run-a")
    gated, broken = page.locator('tr[data-fleet-loop="gated"]'), page.locator('tr[data-fleet-loop="broken"]')
    expect(gated.locator(".gate-q")).to_have_text(f"budget-escalation: {QUESTION}")
    expect(broken.locator("td.status")).to_have_text("failed")
    expect(broken.locator(".cause")).to_have_text(f"STOPPED:stall_limit: {CAUSE}")
    assert broken.locator(".cause").evaluate("e => getComputedStyle(e).color") == "rgb(187, 0, 0)"
    names = page.locator("#fleet-loops tr").evaluate_all(
        "rows => rows.slice(0, 5).map(r => r.dataset.fleetLoop)"
    )
    assert names == ["gated", "broken", "run-a", "run-b", "acme-0"]  # a gate, a failure, running, stuck
    running = [page.locator(f'tr[data-fleet-loop="{n}"]') for n in ("run-a", "run-b")]
    for shown in (
        gated,
        gated.locator('button[data-answer="raise"]'),
        broken,
        broken.locator(".cause"),
        *running,
    ):
        _on_screen(page, shown, 1440, 900)
    assert page.evaluate(OFF_SCREEN, 1440) == []
    expect(page.locator("#local")).to_be_hidden()  # no local loops: no empty table heads the page
    page.screenshot(path=str(shots / "page-1440.png"))


def _chips(page) -> dict:
    return dict(
        page.locator("#fleet-status button").evaluate_all(
            "bs => bs.map(b => [b.dataset.status, Number(b.querySelector('.n').textContent)])"
        )
    )


def _rows(page) -> list[str]:
    return page.locator("#fleet-loops tr").evaluate_all("rows => rows.map(r => r.dataset.fleetLoop)")


def _filters(page) -> None:
    from playwright.sync_api import expect

    every = {"all": 44, "gate": 1, "failed": 1, "running": 2, "stuck": 10, "queued": 40, "done": 0}
    assert _chips(page) == every
    page.locator(".att-failed").click()
    assert _rows(page) == ["broken"]
    page.locator(".att-failed").click()  # again: back to every loop
    expect(page.locator("#fp-where")).to_have_text("1–30 of 44")
    page.locator("#fp-next").click()
    expect(page.locator("#fp-where")).to_have_text("31–44 of 44")
    expect(page.locator("#fleet-loops tr")).to_have_count(14)
    page.locator('#fleet-status button[data-status="running"]').click()
    assert sorted(_rows(page)) == ["run-a", "run-b"]
    page.locator(".att-stuck").click()
    assert sorted(_rows(page)) == [f"acme-{i}" for i in range(10)]
    expect(page.locator('tr[data-fleet-loop="acme-3"] .why-stuck')).to_contain_text("usage limit (429)")
    page.locator('#fleet-status button[data-status="all"]').click()
    page.select_option("#ff-host", "alpha")
    assert sorted(_rows(page)) == ["gated", "run-a"]
    assert _chips(page) == {
        "all": 2,
        "gate": 1,
        "failed": 0,
        "running": 1,
        "stuck": 0,
        "queued": 0,
        "done": 0,
    }
    page.select_option("#ff-host", "")
    page.select_option("#ff-account", "acme")
    assert len(_rows(page)) == 10 and _chips(page)["stuck"] == 10 and _chips(page)["queued"] == 10
    page.select_option("#ff-account", "")
    page.select_option("#ff-tag", "docs")
    assert _rows(page) == [f"q{i:02d}" for i in range(6)] and _chips(page)["all"] == 6
    page.select_option("#ff-tag", "")
    page.fill("#ff-search", "CHANGELOG")
    expect(page.locator("#fleet-loops tr")).to_have_count(5)  # "write the changelog (part 2)" and 4 more
    page.fill("#ff-search", "prompt is too long")  # a cause is searched too
    expect(page.locator("#fleet-loops tr")).to_have_count(1)
    page.fill("#ff-search", "")
    expect(page.locator("#fleet-loops tr")).to_have_count(30)
    assert _chips(page) == every
    page.locator(".att-workers").click()
    expect(page.locator("#fleet-workers li")).to_have_count(1)
    expect(page.locator("#fleet-workers li")).to_have_attribute("data-worker", "w-gamma")
    page.locator(".att-workers").click()
    expect(page.locator("#fleet-workers li")).to_have_count(4)
    expect(page.locator("#fleet-workers li").last).to_have_attribute("data-worker", "w-delta")  # left: last
    expect(page.locator('li[data-worker="w-delta"]')).to_have_attribute("data-state", "stopped")


def _narrow(page, shots: Path) -> None:
    """390 px wide: nothing scrolls sideways, every control is on screen, the raise form too."""
    page.locator('tr[data-fleet-loop="gated"]').scroll_into_view_if_needed()
    page.evaluate("window.scrollTo(0, 0)")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.evaluate(OFF_SCREEN, 390) == []
    page.screenshot(path=str(shots / "page-390.png"))
    page.locator('tr[data-fleet-loop="gated"] button[data-answer="raise"]').click()
    page.locator("#fleet-new summary").click()  # the queue form open as well
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.evaluate(OFF_SCREEN, 390) == []


def _raise(page, reg) -> None:
    """ "raise" asks for the ceiling, refuses what is not above the one the loop has, and the
    ceiling given is the loop's; its timeline says who answered."""
    from playwright.sync_api import expect

    gated = page.locator('tr[data-fleet-loop="gated"]')
    ceiling, said = gated.locator("#raise-max_dollars"), gated.locator(".raise-error")
    expect(ceiling).to_have_value("7.5")  # half as much again, as a raise with no number makes it
    for typed, words in (("4", "above its ceiling now ($5.00)"), ("", "Give the new max_dollars as a number"),
                         ("2000000", "between 0 and 1000000")):  # fmt: skip
        ceiling.fill(typed)
        gated.locator("button.raise-go").click()
        expect(said).to_contain_text(words)
    assert reg.fleet_loop("gated")["status"] == "waiting_gate"  # nothing was sent
    ceiling.fill("12")
    gated.locator("button.raise-go").click()
    expect(gated.locator("td.status")).to_have_text("queued", timeout=30_000)
    row = reg.fleet_loop("gated")
    assert row["spec"]["limits"] == {"max_iterations": 10, "max_dollars": 12}
    assert (row["gate"]["answer"], row["gate"]["by"], row["gate"]["raised"]) == (
        "raise",
        "page",
        {"max_dollars": [5, 12]},
    )
    gated.locator("button.timeline").click()
    answer = page.locator('#ftl-rows li[data-kind="gate"]')
    expect(answer).to_contain_text(f"gate budget-escalation answered raise by {row['gate']['user']} (page)")
    expect(answer).to_contain_text("max_dollars 5 → 12")
    page.locator('tr[data-fleet-loop="broken"] button.timeline').click()
    expect(page.locator("#ftl-cause")).to_have_text(f"failed: STOPPED:stall_limit: {CAUSE}")


def _cancel(page, reg) -> None:
    from playwright.sync_api import expect

    row = page.locator('tr[data-fleet-loop="q00"]')
    row.locator("button.cancel").click()
    expect(row.locator(".confirm-q")).to_have_text("Cancel q00 for good?")
    assert page.evaluate(OFF_SCREEN, 390) == []
    row.locator("button.confirm-no").click()
    expect(row.locator("button.cancel")).to_be_visible()
    assert reg.fleet_loop("q00")["status"] == "queued"
    row.locator("button.cancel").click()
    row.locator("button.confirm-yes").click()
    expect(page.locator('#fleet-status button[data-status="done"] .n')).to_have_text("1", timeout=30_000)
    assert reg.fleet_loop("q00")["outcome"] == "CANCELLED"
    page.locator('#fleet-status button[data-status="done"]').click()  # ended loops sort last: here it is
    expect(row.locator("td.status")).to_have_text("cancelled")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_a_monitor_with_nothing_to_show_says_so(project, tmp_path):
    """No fleet (the embedded database, empty) and no loop here: one line says so, no table."""
    from playwright.sync_api import expect, sync_playwright

    cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0"]
    monitor = subprocess.Popen(
        cmd, env=lw_env(XDG_DATA_HOME=str(tmp_path / "data")), stdout=subprocess.PIPE, text=True
    )
    try:
        login = next(line.split("open ")[1].split()[0] for line in monitor.stdout if "/login?code=" in line)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(login)
            page.locator("#sign-in").click()
            expect(page.locator("#local-none")).to_have_text(
                "No local loops in the projects this monitor serves."
            )
            expect(page.locator("table")).to_have_count(3)  # the local one, the fleet's, the timeline's
            for table in page.locator("table").all():
                expect(table).to_be_hidden()
            expect(page.locator("#fleet")).to_be_hidden()
            browser.close()
    finally:
        monitor.terminate()
        monitor.wait(timeout=30)
