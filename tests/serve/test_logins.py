"""Sign-in links, in process: a link's GET shows a button and uses nothing up (link previews
fetch links), the POST uses it once; links made by `serve --login` are taken only from a
private file of this user's, young enough; `--login` prints a link only for a port answered
by a monitor that proves it holds this user's token."""

from __future__ import annotations

import os
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from starlette.testclient import TestClient

from loopwright.registry import open_registry
from loopwright.serve import app as api
from loopwright.serve import logins, token

TOKEN = "t" * 40


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return token.data_dir()


@pytest.fixture
def monitor(tmp_path, project, home):
    reg = open_registry(str(tmp_path / "runs.sqlite"))
    yield api.Monitor([project], reg, None, TOKEN, home=home)
    reg.close()


def browser(monitor):
    return TestClient(api.make_app(monitor), client=("127.0.0.1", 50000))


def sign_in(c, code, **headers):
    return c.post("/login", data={"code": code}, headers=headers, follow_redirects=False)


def test_a_link_made_later_works_once_and_only_by_its_post(monitor, home):
    code = logins.mint(home)
    c = browser(monitor)
    assert c.get(f"/login?code={code}").status_code == 200  # the preview
    assert c.get(f"/login?code={code}").status_code == 200  # the user
    assert c.get("/").status_code == 401  # no session from a GET
    res = sign_in(c, code)
    assert res.status_code == 303 and c.get("/").status_code == 200
    assert sign_in(browser(monitor), code).status_code == 401
    assert browser(monitor).get(f"/login?code={code}").status_code == 401
    assert os.listdir(home / "logins") == []


def test_another_sites_form_cannot_sign_in(monitor):
    code = monitor.login_code()
    c = browser(monitor)
    assert sign_in(c, code, origin="http://evil.example").status_code == 403
    assert sign_in(c, code, origin="null").status_code == 403
    assert sign_in(c, code, origin="http://testserver").status_code == 303  # its own page: still good


@pytest.mark.parametrize("spoil", ["readable", "expired", "link", "open-directory"])
def test_a_link_file_that_is_not_private_and_fresh_is_refused(monitor, home, tmp_path, spoil):
    code = logins.mint(home)
    (path,) = (home / "logins").iterdir()
    if spoil == "readable":
        path.chmod(0o644)
    elif spoil == "expired":
        old = time.time() - logins.TTL - 60
        os.utime(path, (old, old))
    elif spoil == "link":
        target = tmp_path / "elsewhere"
        target.write_text("")
        target.chmod(0o600)
        path.unlink()
        path.symlink_to(target)
    else:
        (home / "logins").chmod(0o755)
    assert browser(monitor).get(f"/login?code={code}").status_code == 401
    assert sign_in(browser(monitor), code).status_code == 401


class Answer(BaseHTTPRequestHandler):
    """Something on the port that answers the challenge with an HMAC under ``key``."""

    key = "k" * 40

    def do_GET(self):
        challenge = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["challenge"][0]
        body = logins.proof(self.key, challenge).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_login_prints_a_link_only_for_a_monitor_that_proves_the_token(home):
    with pytest.raises(logins.NoMonitor, match="no monitor is running"):
        logins.read_token(home)
    secret = token.token(home)
    with pytest.raises(logins.NoMonitor, match="no monitor is running"):
        logins.running_port(home, secret)  # no monitor.json
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        logins.record(home, port)
        assert oct((home / "monitor.json").stat().st_mode & 0o777) == "0o600"
        with pytest.raises(logins.NoMonitor, match="not your monitor"):
            logins.running_port(home, secret)  # another program took the port
        Answer.key = secret
        assert logins.running_port(home, logins.read_token(home)) == port
        (home / "monitor.json").chmod(0o644)
        with pytest.raises(logins.NoMonitor, match="not a record the monitor wrote"):
            logins.running_port(home, secret)
    finally:
        server.shutdown()
        server.server_close()
    logins.forget(home)
    assert not (home / "monitor.json").exists()
