"""`loopwright serve --db URL` processes on one fleet database: each shows the fleet, each has its
own token and sign-ins and refuses the other's (the database stores neither), and each one's
event stream brings a change of the fleet to its page: by NOTIFY on PostgreSQL, by the slow poll
of the registry's mark on SQLite."""

from __future__ import annotations

import http.client
import json
import queue
import subprocess
import threading
import urllib.parse
from pathlib import Path

from conftest import REPO, lw_env
from loopwright.registry import open_registry
from waiting import wait_for

REPO_URL = "https://example.com/acme/site.git"


class Serve:
    """A monitor process with a data directory of its own (its token, its sign-in links)."""

    def __init__(self, project: Path, url: str, data: Path) -> None:
        cmd = [str(REPO / "bin" / "loopwright"), "-C", str(project), "serve", "--port", "0", "--db", url]
        self.proc = subprocess.Popen(
            cmd, env=lw_env(XDG_DATA_HOME=str(data)), stdout=subprocess.PIPE, text=True
        )
        self.port = self.login = None
        for line in self.proc.stdout:
            if "API on " in line:
                self.port = urllib.parse.urlsplit(line.split("API on ")[1].split()[0]).port
            if "/login?code=" in line:
                self.login = urllib.parse.parse_qs(
                    urllib.parse.urlsplit(line.split("open ")[1].split()[0]).query
                )
                break
        assert self.port and self.login, "the monitor did not say where it listens"
        self.token = (data / "loopwright" / "serve" / "token").read_text().strip()

    def request(self, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body, headers or {})
            res = conn.getresponse()
            return res.status, res.getheader("set-cookie") or "", res.read()
        finally:
            conn.close()

    def fleet(self, **headers) -> tuple[int, dict]:
        status, _, raw = self.request("GET", "/api/fleet", headers)
        return status, json.loads(raw)

    def sign_in(self) -> str:
        """The page's session cookie, from the one-time link this monitor printed."""
        form = urllib.parse.urlencode({"code": self.login["code"][0]}).encode()
        status, cookie, _ = self.request(
            "POST", "/login", {"Content-Type": "application/x-www-form-urlencoded"}, form
        )
        assert status == 303 and cookie.startswith("loopwright_session=")
        return cookie.split(";")[0]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def everything_stored(url: str) -> str:
    """Every row of every table of the database, as text."""
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        return "\n".join(repr(conn.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)


def test_two_monitors_on_one_database_each_with_its_own_token_and_sign_in(pg_url, project, tmp_path):
    reg = open_registry(pg_url)
    reg.submit(kind="prompt", spec={"goal": "shared work"}, repo=REPO_URL, name="shared")
    a = Serve(project, pg_url, tmp_path / "a")
    b = Serve(project, pg_url, tmp_path / "b")
    try:
        assert a.token != b.token
        for m in (a, b):
            status, fleet = m.fleet(**bearer(m.token))
            assert status == 200 and fleet["show"] and [r["name"] for r in fleet["loops"]] == ["shared"]
        assert a.fleet(**bearer(b.token))[0] == 401 and b.fleet(**bearer(a.token))[0] == 401
        cookie_a, cookie_b = a.sign_in(), b.sign_in()
        assert a.fleet(Cookie=cookie_a)[0] == 200 and b.fleet(Cookie=cookie_b)[0] == 200
        assert b.fleet(Cookie=cookie_a)[0] == 401 and a.fleet(Cookie=cookie_b)[0] == 401
        status, _, _ = a.request("POST", "/api/fleet/shared/stop", bearer(b.token))
        assert status == 401 and reg.fleet_loop("shared")["status"] == "queued"
        stored = everything_stored(pg_url)
        secrets = (a.token, b.token, cookie_a.split("=", 1)[1], cookie_b.split("=", 1)[1])
        assert "shared work" in stored and not [s for s in secrets if s in stored]
    finally:
        a.close()
        b.close()
        reg.close()


def read_events(m: Serve, into: queue.Queue) -> None:
    """The monitor's event stream, one (event, data) at a time, into ``into``."""
    conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=120)
    conn.request("GET", "/api/events", headers=bearer(m.token))
    res = conn.getresponse()
    kind = None
    for raw in res:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            into.put((kind, json.loads(line[6:])))


def test_a_change_of_the_fleet_reaches_the_event_stream(registry_url, project, tmp_path):
    reg = open_registry(registry_url)
    reg.submit(kind="prompt", spec={"goal": "g"}, repo=REPO_URL, name="first")
    m = Serve(project, registry_url, tmp_path / "m")
    got: queue.Queue = queue.Queue()
    fleets: list[dict] = []

    def fleet_where(test):
        def seen():
            while not got.empty():
                kind, data = got.get()
                if kind == "fleet":
                    fleets.append(data)
            return next((f for f in fleets if test(f)), None)

        return seen

    try:
        threading.Thread(target=read_events, args=(m, got), daemon=True).start()
        wait_for(
            fleet_where(lambda f: [r["name"] for r in f["loops"]] == ["first"]), "the fleet's first event"
        )
        row = reg.claim("w-1", "alpha", lease=60)
        reg.worker_beat("w-1", "alpha", 1, 1, None, [row["id"]])
        reg.progress(row["id"], row["generation"], iteration=3, dollars=1.5)

        def iterated(f):
            (loop,) = f["loops"]
            return loop["iteration"] == 3 and loop["host"] == "alpha" and f["workers"]

        fleet = wait_for(fleet_where(iterated), "the iteration in the event stream", within=60)
        assert fleet["queue"]["running"] == 1 and fleet["workers"][0]["used"] == 1
    finally:
        m.close()
        reg.close()
