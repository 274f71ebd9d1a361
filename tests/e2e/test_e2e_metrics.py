"""A live fleet scraped as Prometheus scrapes it: the real `loopwright serve --db` on a real
PostgreSQL, a real worker driving a loop with the real Claude Code CLI against the scripted
Messages API to LOOP_DONE, and `GET /metrics` read over HTTP and parsed with prometheus_client's
own parser. Its numbers are the fleet's while the loop runs and after it ends; the API's port
takes the token, and `--metrics-public` serves the metrics alone on a port of its own without
one."""

from __future__ import annotations

import subprocess
import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import fakeapi
from conftest import REPO, lw_env
from fleetkit import lw, lw_here, make_remote, row_of, start_worker, stop_worker
from loopwright.registry import open_registry
from waiting import wait_for

pytestmark = pytest.mark.e2e


class Serve:
    """`loopwright serve --db URL --metrics-public --metrics-port 0`: its ports, from what it says."""

    def __init__(self, project, url: str, data):
        cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0", "--db", url,
               "--metrics-public", "--metrics-port", "0"]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            env=lw_env(XDG_DATA_HOME=str(data)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.said: list[str] = []
        self.api = self.public = None
        found = threading.Event()

        def read():  # all of it, so the monitor never blocks on a full pipe
            for line in self.proc.stdout:
                self.said.append(line)
                if "API on " in line:
                    self.api = line.split("API on ")[1].split("/api/")[0]
                if "(no token: --metrics-public)" in line:
                    self.public = line.split("metrics on ")[1].split("/metrics")[0]
                if self.api and self.public:
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        assert found.wait(120) and self.api and self.public, f"the monitor never said where: {self.said}"
        self.token = (data / "loopwright" / "serve" / "token").read_text().strip()

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=60)


def get(base: str, path: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(base + path)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scraped(base: str, token: str | None = None) -> dict:
    status, text = get(base, "/metrics", token)
    assert status == 200, text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict, name: str, **labels) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def test_a_live_fleet_scraped_with_and_without_the_token(pg_url, project, tmp_path):
    remote = make_remote(tmp_path)
    queued = lw_here("submit", "--db", pg_url, "--repo", f"file://{remote}", "--name", "notes",
                "--account", "acme", "--completion-promise", "DONE", "--max-iterations", "5",
                "write the notes")  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    assert lw("fleet", "limits", "--db", pg_url, "--max-dollars-per-day", "40").returncode == 0
    release = threading.Event()  # the first turn waits until the running fleet has been scraped
    replies = [
        fakeapi.hang(300, fakeapi.bash("echo one > notes.txt", text="Starting the notes."), release=release),
        fakeapi.text("Iteration one written."),
        fakeapi.bash("echo two >> notes.txt"),
        fakeapi.text("All done.\n<promise>DONE</promise>"),
    ]
    serve = Serve(project, pg_url, tmp_path / "data")
    try:
        with fakeapi.ScriptedServer(replies) as server:
            worker = start_worker(pg_url, remote, tmp_path / "w1", server, tmp_path / "home")
            try:
                wait_for(lambda: server.conversation_requests, "the first turn", within=180, proc=worker)
                running = scraped(serve.api, serve.token)
                release.set()
                row = wait_for(
                    lambda: (r := row_of(pg_url, "notes")).get("status") == "ended" and r,
                    "the loop to end",
                    within=240,
                    every=0.5,
                    proc=worker,
                )
                ended = scraped(serve.api, serve.token)
                public = scraped(serve.public)
            finally:
                release.set()
                log = stop_worker(worker)
        assert row["outcome"] == "LOOP_DONE", log
        _the_running_fleet(running)
        _the_ended_fleet(ended, row, pg_url)
        for key in ("loopwright_claims_total", "loopwright_iterations_total", "loopwright_loops"):
            assert {k: v for k, v in public.items() if k[0] == key} == {
                k: v for k, v in ended.items() if k[0] == key
            }
        _who_may_scrape(serve)
    finally:
        serve.end()


def _the_running_fleet(found: dict) -> None:
    assert value(found, "loopwright_loops", status="running", account="acme") == 1
    assert value(found, "loopwright_claims_total") == 1
    assert value(found, "loopwright_iterations_total", where="fleet") == 0
    assert value(found, "loopwright_workers", state="alive") == 1
    assert value(found, "loopwright_worker_slots", use="used") == 1
    assert value(found, "loopwright_fleet_cap_dollars", scope="fleet") == 40


def _the_ended_fleet(found: dict, row: dict, url: str) -> None:
    assert value(found, "loopwright_loops", status="ended", account="acme") == 1
    assert value(found, "loopwright_loops", status="running", account="acme") == 0
    assert value(found, "loopwright_loops_ended_total", outcome="LOOP_DONE") == 1
    assert value(found, "loopwright_iterations_total", where="fleet") == row["iteration"] == 2
    assert value(found, "loopwright_claims_total") == row["generation"] == 1
    assert value(found, "loopwright_failovers_total") == 0
    assert value(found, "loopwright_gates_waiting") == 0
    reg = open_registry(url)
    try:
        spent = reg.spend_today()
    finally:
        reg.close()
    assert spent > 0 and value(found, "loopwright_spend_dollars_today", scope="fleet") == pytest.approx(spent)
    assert value(found, "loopwright_spend_dollars_today", scope="account:acme") == pytest.approx(spent)
    assert spent == pytest.approx(row["dollars"])
    assert value(found, "loopwright_iteration_seconds_count", where="fleet") == 2  # one per iteration event


def _who_may_scrape(serve: Serve) -> None:
    assert get(serve.api, "/metrics")[0] == 401
    assert get(serve.api, "/metrics", "x" * 43)[0] == 401
    assert get(serve.public, "/metrics")[0] == 200
    assert get(serve.public, "/api/fleet")[0] == 404  # the public port answers nothing else
    assert get(serve.public, "/api/fleet", serve.token)[0] == 404
    assert get(serve.api, "/api/fleet")[0] == 401  # the API's port still takes the token
    assert get(serve.api, "/api/fleet", serve.token)[0] == 200
