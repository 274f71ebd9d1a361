"""`GET /metrics` in process, the same assertions on the embedded SQLite registry and on a real
PostgreSQL: the token, every number read from the database (so a restarted monitor gives the
same totals), the timeline read once past its high-water mark, workers' states, labels a row's
writer cannot blow up, and this machine's loops' histories read forward."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from conftest import REPO, cli, lw_env, one_line_error
from loopwright.registry import open_registry
from loopwright.registry.fleetnumbers import SETTLE_SECONDS
from loopwright.registry.workers import STALE_AFTER, STOPPED_AFTER, worker_state
from loopwright.serve import app as api
from loopwright.serve import metrics

TOKEN = "m" * 40
REPO_URL = "https://example.com/acme/site.git"


class NoRuns:
    def start(self, *args, **kwargs):
        raise AssertionError("no local run here")


@pytest.fixture
def monitor(registry_url, project):
    reg = open_registry(registry_url)
    m = api.Monitor([project], reg, NoRuns(), TOKEN)
    yield m
    m.fleet.stop()
    reg.close()


def scrape(monitor, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    c = TestClient(api.make_app(monitor), client=("127.0.0.1", 50000), headers=headers)
    return c.get("/metrics")


def samples(text: str) -> dict:
    """{(sample name, frozenset of labels): value} of a scrape's text."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: dict, name: str, **labels) -> float:
    return found[(name, frozenset(labels.items()))]


def numbers(monitor) -> dict:
    res = scrape(monitor)
    assert res.status_code == 200, res.text
    return samples(res.text)


def sql(reg, statement: str, args: tuple = ()) -> None:
    """A write straight into the database, as anyone who can write to it could."""
    with reg.backend.tx() as tx:
        tx.run(statement, args)


def iteration(n: int, seconds: int) -> dict:
    return {"iteration": n, "outcome": "continued", "started_at": "2026-01-01T00:00:00Z",
            "ended_at": f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"}  # fmt: skip


def test_metrics_take_the_token_as_the_api_does(monitor):
    assert scrape(monitor, token=None).status_code == 401
    wrong = scrape(monitor, token="n" * 40)
    assert wrong.status_code == 401 and "Authorization: Bearer" in wrong.json()["error"]
    ok = scrape(monitor)
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/plain; version=0.0.4")
    far = TestClient(api.make_app(monitor), client=("203.0.113.9", 50000))
    assert far.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 403


def _fleet(reg) -> dict:
    """Two queued loops (two accounts), one running after a failover, one at a gate, one done,
    spend, caps, and three workers: one alive, one stale, one stopped."""
    for name, account in (
        ("gate", "acme"),
        ("done", "beta"),
        ("run", "acme"),
        ("q1", "acme"),
        ("q2", "beta"),
    ):
        reg.submit(kind="prompt", spec={"goal": name}, repo=REPO_URL, name=name, account=account)
    claims = {}
    for name in ("gate", "done", "run"):  # run's lease runs out at once: the next claim fails over
        claims[name] = reg.claim("w-alpha", "alpha", lease=-5 if name == "run" else 600)
        assert claims[name]["name"] == name
    ran = reg.claim("w-beta", "beta", lease=600)
    assert ran["name"] == "run" and ran["failovers"] == 1
    reg.record_spend(ran["id"], ran["generation"], 1.25, iteration=3, dollars=1.25, reserve=0.4)  # holds 2 x
    for n, seconds in ((1, 20), (2, 70), (3, 400)):
        reg.add_event(ran["id"], ran["generation"], "iteration", iteration(n, seconds))
    g = claims["gate"]
    reg.record_spend(g["id"], g["generation"], 0.5, iteration=1, dollars=0.5)
    reg.progress(g["id"], g["generation"], status="waiting_gate", gate={"name": "budget-escalation"})
    d = claims["done"]
    reg.record_spend(d["id"], d["generation"], 2.0, iteration=2, dollars=2.0)
    reg.finish(d["id"], d["generation"], "LOOP_DONE", "done")
    reg.set_limits("fleet", max_dollars_per_day=50)
    reg.set_limits("account:acme", max_dollars_per_day=10)
    for worker, host in (("w-alpha", "alpha"), ("w-beta", "beta"), ("w-gamma", "gamma")):
        reg.worker_beat(worker, host, 2, 1 if worker == "w-beta" else 0, None, [])
    sql(reg, "UPDATE fleet_workers SET beat_at = beat_at - %s WHERE worker = 'w-alpha'", (STALE_AFTER + 5,))
    sql(reg, "UPDATE fleet_workers SET beat_at = beat_at - %s WHERE worker = 'w-gamma'", (STOPPED_AFTER + 5,))
    return claims


def test_the_numbers_are_the_fleets(monitor):
    reg = monitor.registry
    _fleet(reg)
    found = numbers(monitor)
    loops = {
        dict(k[1])["status"] + "/" + dict(k[1])["account"]: v
        for k, v in found.items()
        if k[0] == "loopwright_loops"
    }
    assert loops == {"queued/acme": 1, "queued/beta": 1, "running/acme": 1, "waiting_gate/acme": 1,
                     "ended/beta": 1}  # fmt: skip
    rows = {r["name"]: r for r in reg.fleet_loops()}
    assert value(found, "loopwright_claims_total") == sum(r["generation"] for r in rows.values()) == 4
    assert value(found, "loopwright_failovers_total") == 1
    assert value(found, "loopwright_iterations_total", where="fleet") == 3 + 1 + 2
    assert value(found, "loopwright_gates_waiting") == 1
    assert value(found, "loopwright_loops_ended_total", outcome="LOOP_DONE") == 1
    assert value(found, "loopwright_spend_dollars_today", scope="fleet") == pytest.approx(3.75)
    assert value(found, "loopwright_spend_dollars_today", scope="account:acme") == pytest.approx(1.75)
    assert value(found, "loopwright_fleet_cap_dollars", scope="fleet") == 50
    assert value(found, "loopwright_fleet_cap_dollars", scope="account:acme") == 10
    assert value(found, "loopwright_held_dollars", scope="fleet") == pytest.approx(0.8)
    assert value(found, "loopwright_held_dollars", scope="account:acme") == pytest.approx(0.8)
    held = {dict(k[1])["scope"] for k in found if k[0] == "loopwright_held_dollars"}
    assert held == {"fleet", "account:acme"}  # the fleet and each capped scope, 0 when nothing runs
    assert [value(found, "loopwright_workers", state=s) for s in ("alive", "stale", "stopped")] == [1, 1, 1]
    assert value(found, "loopwright_workers_quiet") == 2  # the stale one and the one silent 10 minutes
    assert value(found, "loopwright_worker_slots", use="used") == 1
    assert value(found, "loopwright_worker_slots", use="free") == 1
    buckets = {dict(k[1])["le"]: v for k, v in found.items() if k[0] == "loopwright_iteration_seconds_bucket"
               and dict(k[1])["where"] == "fleet"}  # fmt: skip
    assert (buckets["15"], buckets["30"], buckets["120"], buckets["300"], buckets["600"]) == (0, 1, 2, 2, 3)
    assert value(found, "loopwright_iteration_seconds_count", where="fleet") == 3
    assert value(found, "loopwright_iteration_seconds_sum", where="fleet") == 490


def test_totals_survive_a_restart_and_the_timeline_is_read_once(monitor, registry_url, project):
    reg = monitor.registry
    claims = _fleet(reg)
    sql(reg, "UPDATE fleet_events SET at = at - %s", (SETTLE_SECONDS + 5,))  # settled: past the mark
    first = numbers(monitor)
    tail = metrics.numbers_of(monitor).fleet_tail
    newest = max(e["id"] for r in reg.fleet_loops() for e in reg.events(r["id"]))
    assert tail.mark == newest
    g = claims["gate"]
    # A young event (its transaction may not be the last to commit): read at every scrape, once each.
    reg.add_event(g["id"], g["generation"], "iteration", iteration(1, 10))
    for _ in range(2):
        again = numbers(monitor)
        assert value(again, "loopwright_iteration_seconds_count", where="fleet") == 4
    assert tail.mark == newest
    other = open_registry(registry_url)  # a monitor started afresh: the same totals
    try:
        fresh = api.Monitor([project], other, NoRuns(), TOKEN)
        restarted = numbers(fresh)
    finally:
        other.close()
    for key, v in first.items():
        if key[0] in ("loopwright_claims_total", "loopwright_iterations_total", "loopwright_failovers_total"):
            assert restarted[key] == v
    assert value(restarted, "loopwright_iteration_seconds_count", where="fleet") == 4
    assert value(restarted, "loopwright_iteration_seconds_sum", where="fleet") == 500


def test_a_young_event_is_read_once_and_one_committed_late_is_not_missed(monitor):
    """Young events' lines are parsed once and kept; an iteration event that appears below the
    newest one read (its transaction committed after a later one's) is read when it appears."""
    reg = monitor.registry
    reg.submit(kind="prompt", spec={"goal": "g"}, repo=REPO_URL, name="one")
    row = reg.claim("w-alpha", "alpha", lease=600)
    for n, seconds in ((1, 10), (2, 20), (3, 30)):
        reg.add_event(row["id"], row["generation"], "iteration", iteration(n, seconds))
    events = [e for e in reg.events(row["id"]) if e["kind"] == "iteration"]  # not its claim's
    late = events[1]
    sql(reg, "DELETE FROM fleet_events WHERE id = %s", (late["id"],))  # not committed yet
    found = numbers(monitor)
    assert value(found, "loopwright_iteration_seconds_sum", where="fleet") == 40
    sql(
        reg,
        "UPDATE fleet_events SET data = %s WHERE id = %s",
        (json.dumps(iteration(1, 50)), events[0]["id"]),
    )
    sql(
        reg,
        "INSERT INTO fleet_events (id, loop_id, at, generation, kind, data) "
        "VALUES (%s, %s, %s, 1, 'iteration', %s)",
        (late["id"], row["id"], late["at"], json.dumps(late["data"])),
    )  # now it commits
    for _ in range(2):
        found = numbers(monitor)
        assert value(found, "loopwright_iteration_seconds_count", where="fleet") == 3
        assert value(found, "loopwright_iteration_seconds_sum", where="fleet") == 60  # the first read kept


def test_a_rows_writer_cannot_blow_up_the_labels(monitor):
    reg = monitor.registry
    for n in range(metrics.MAX_SERIES + 30):
        reg.submit(kind="prompt", spec={"goal": "g"}, repo=REPO_URL, name=f"l{n}", account=f"acct{n}")
    hostile = 'x"} 1\nloopwright_claims_total 99\n' + "y" * 500
    sql(reg, "UPDATE fleet_loops SET account = %s WHERE name = 'l0'", (hostile,))
    sql(reg, "UPDATE fleet_loops SET status = 'ended', outcome = %s WHERE name = 'l1'", (hostile,))
    for n in range(2, 62):  # statuses no loopwright writes, and a generation below zero
        sql(reg, "UPDATE fleet_loops SET status = %s WHERE name = %s", (f"odd-{n}", f"l{n}"))
    sql(reg, "UPDATE fleet_loops SET generation = -1000 WHERE name = 'l62'")
    reg.set_limits(f"tag:{'t' * 300}", max_dollars_per_day=5)
    found = numbers(monitor)  # it parses: a value cannot end a line or a label
    series = [k for k in found if k[0] == "loopwright_loops"]
    assert len(series) <= metrics.MAX_SERIES
    assert {dict(k[1])["status"] for k in series} == {"queued", "ended", metrics.OTHER}
    assert sum(found[k] for k in series) == metrics.MAX_SERIES + 30
    assert value(found, "loopwright_claims_total") == 0
    labels = [v for k in found for _, v in k[1]]
    assert max(len(v) for v in labels) <= metrics.MAX_LABEL
    assert all("\n" not in v for v in labels)
    assert value(found, "loopwright_loops", status="queued", account=metrics.OTHER) > 0


def test_a_workers_state_comes_from_its_last_beat():
    assert worker_state({"age": 0.0}) == "alive"
    assert worker_state({"age": STALE_AFTER}) == "stale"
    assert worker_state({"age": STOPPED_AFTER}) == "stopped"
    assert worker_state({"age": 1.0, "state": "stopped"}) == "stopped"  # it said so
    assert worker_state({"age": 1.0, "stopped_at": 12.0}) == "stopped"
    assert worker_state({"age": "soon"}) == "stopped"  # a row nobody can read is no live worker


def start_local(project) -> None:
    """A local loop named ``prompt``, started (and signed) by the real `loopwright start`."""
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(project), "start", "--session", "S1", "goal"],
        env=lw_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr


def loop_dir(project, name="prompt"):
    return project / ".loopwright" / "loops" / name


def _history(path, lines) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(x) + "\n" for x in lines)


def test_local_loops_histories_are_read_forward(monitor, project):
    start_local(project)
    history = loop_dir(project) / "history.jsonl"
    _history(history, [iteration(1, 10), iteration(2, 100), dict(iteration(0, 5), counted=False)])
    found = numbers(monitor)
    assert value(found, "loopwright_iterations_total", where="local") == 2
    assert value(found, "loopwright_iteration_seconds_sum", where="local") == 110
    # A copy under another name is not this user's loop: its history is no metric.
    shutil.copytree(loop_dir(project), loop_dir(project, "copied"))
    _history(loop_dir(project, "copied") / "history.jsonl", [iteration(3, 1000)])
    with open(history, "a", encoding="utf-8") as fh:
        fh.write(
            json.dumps(iteration(3, 20)) + "\n{not json\n" + '{"iteration": 4, "outc'
        )  # one being written
    found = numbers(monitor)
    assert value(found, "loopwright_iterations_total", where="local") == 3
    assert value(found, "loopwright_iteration_seconds_sum", where="local") == 130
    seen = metrics.numbers_of(monitor).local._files[str(history)]
    assert seen.offset == history.stat().st_size - len('{"iteration": 4, "outc')
    history.write_text(json.dumps(iteration(1, 7)) + "\n")  # rewritten shorter: read again from the start
    found = numbers(monitor)
    assert value(found, "loopwright_iterations_total", where="local") == 1
    assert value(found, "loopwright_iteration_seconds_sum", where="local") == 7


def test_the_grafana_dashboard_charts_only_what_is_exported(project, tmp_path):
    """docs/grafana-dashboard.json parses, and every metric its queries name is one a scrape
    gives (a renamed metric fails here, not on an operator's wall)."""
    import re

    reg = open_registry(str(tmp_path / "registry.sqlite"))
    try:
        _fleet(reg)
        exported = {name for name, _ in numbers(api.Monitor([project], reg, NoRuns(), TOKEN))}
    finally:
        reg.close()
    board = json.loads((REPO / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8
    named = {m for e in exprs for m in re.findall(r"\bloopwright_[a-z_]+", e)}
    assert named and named <= exported, named - exported
    assert any("histogram_quantile" in e and "loopwright_iteration_seconds_bucket" in e for e in exprs)
    doc = (REPO / "docs" / "monitor.md").read_text()
    assert "grafana-dashboard.json" in doc and "metrics_path: /metrics" in doc


def test_the_public_ports_options_are_checked(project, tmp_path):
    import pgcluster

    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    alone = one_line_error(cli(project, "serve", "--metrics-port", "9000", env=env))
    assert "--metrics-port and --metrics-host are where --metrics-public listens" in alone
    port = str(pgcluster.free_port())
    same = one_line_error(
        cli(project, "serve", "--port", port, "--metrics-public", "--metrics-port", port, env=env)
    )
    assert f"--metrics-port {port} is the API's port: choose another" in same
    away = cli(project, "serve", "--port", "0", "--metrics-public", "--metrics-host", "192.0.2.1", env=env)
    assert "cannot listen on 192.0.2.1:8766" in one_line_error(away) and "--metrics-host" in away.stderr


def test_holds_are_a_series_of_0_for_each_cap_while_nothing_runs(monitor):
    """A dashboard's panel of holds shows 0, not "no data", on an idle fleet with caps."""
    monitor.registry.set_limits("tag:nightly", max_dollars_per_day=5)
    found = numbers(monitor)
    assert value(found, "loopwright_held_dollars", scope="fleet") == 0
    assert value(found, "loopwright_held_dollars", scope="tag:nightly") == 0
