"""The monitor's REST API (Starlette): the ai-cli-task seed's task-auto endpoints, every
loop of the registered projects, starting runs, answering gates, stopping, the fleet
(fleetapi.py), and a stream of changes. Loopback only; every call needs the bearer token;
bodies are size-limited; a project or task directory outside the registered projects is refused."""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
import urllib.parse
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    StreamingResponse,
)
from starlette.routing import Route

from loopwright.actions import gates, pick
from loopwright.actions.overview import spend_by_iteration, summaries
from loopwright.core import jsoncodec
from loopwright.core.errors import UserError
from loopwright.registry import Busy, RegistryError
from loopwright.serve import files, fleetapi, logins, metrics, page
from loopwright.serve.fleetwatch import FleetWatch
from loopwright.serve.requests import MAX_BODY, ApiError, body, body_bytes, count, error
from loopwright.state import loops

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class Monitor:
    """What the API works on: the registered projects, the registry and the runs."""

    def __init__(self, projects: list[Path], registry, runs, token: str, home: Path | None = None):
        self.projects = [Path(p).resolve() for p in projects]
        self.registry, self.runs, self.token = registry, runs, token
        self.home = home  # the data directory: links made by `serve --login` (serve/logins.py)
        self.login_codes: set[str] = set()  # one-time links to the page
        self.sessions: dict[str, str] = {}  # the page's cookie -> its CSRF token
        self.fleet = FleetWatch(registry)  # the fleet's snapshot, rebuilt when NOTIFY or a poll says
        self.closing = False  # set as the server is asked to exit: every event stream ends

    def login_code(self) -> str:
        code = secrets.token_urlsafe(24)
        self.login_codes.add(code)
        return code

    def login_valid(self, code: str, consume: bool) -> bool:
        """Whether ``code`` is a live sign-in code (printed at start, or made by `serve --login`);
        ``consume`` uses it up."""
        if code in self.login_codes:
            if consume:
                self.login_codes.discard(code)
            return True
        return logins.check(self.home, code, consume)

    def project_or_only(self, value: object) -> Path:
        """The project named, or with none named the only one this monitor serves."""
        if value is None and len(self.projects) == 1:
            return self.projects[0]
        if value is None:
            served = ", ".join(map(str, self.projects))
            raise ApiError(
                400, f'this monitor serves {len(self.projects)} projects: name one with "project" ({served})'
            )
        return self.project(value)

    def project(self, value: object) -> Path:
        if not isinstance(value, str) or not value:
            raise ApiError(400, "name the project (an absolute path)")
        path = Path(value).resolve()
        if path not in self.projects:
            raise ApiError(403, f"{value} is not one of the projects this monitor serves")
        return path

    def task_dir(self, value: object) -> tuple[Path, str]:
        """The project and module of a task directory ``<project>/TASK/<module>``."""
        if not isinstance(value, str) or not value:
            raise ApiError(400, "name the task directory (taskDir)")
        path = Path(value).resolve()
        if path.parent.name != "TASK" or path.parent.parent not in self.projects:
            raise ApiError(403, f"{value} is not a TASK/<module> of a project this monitor serves")
        return path.parent.parent, path.name

    def loops(self) -> dict:
        out = []
        for project in self.projects:
            found, problems = summaries(project / ".loopwright")
            for loop in found:
                loop["spend"] = spend_by_iteration(project / ".loopwright", loop["name"])
            out.append({"project": str(project), "loops": found, "problems": problems})
        return {"projects": out, "runs": self.registry.all()}


def limits_of(data: dict) -> dict:
    out = {}
    for key, alias in (
        ("max_iterations", "maxIterations"),
        ("max_minutes", "timeout"),
        ("max_dollars", "maxDollars"),
    ):
        value = data.get(key, data.get(alias))
        if value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ApiError(400, f"{key} must be a positive number")
            out[key] = value
    return out


async def list_loops(request: Request):
    m = request.app.state.monitor
    return JSONResponse(m.loops())


async def start_loop(request: Request):
    m = request.app.state.monitor
    data = await body(request)
    if "repo" in data:  # a loop for the fleet's workers, not one this monitor runs
        return await fleetapi.submit(request, data)
    project = m.project_or_only(data.get("project"))
    what = data.get("command") or data.get("goal")
    if not isinstance(what, str) or not what.strip():
        raise ApiError(400, "give a goal, or a command such as /loopwright:task auto <module>")
    row = m.runs.start(str(project), what, limits_of(data))
    return JSONResponse({"run": row}, status_code=201)


async def stop_run(request: Request):
    m = request.app.state.monitor
    row = m.registry.get(request.path_params["run_id"])
    if row is None:
        raise ApiError(404, "no such run")
    return JSONResponse({"run": _stop(m, row)})


async def stop_loop(request: Request):
    """Stop any active loop of a served project, whoever runs it (a terminal's `loopwright
    run`, a session): its stop file, read at its next Stop."""
    m = request.app.state.monitor
    data = await body(request)
    project = m.project(data.get("project"))
    if not isinstance(data.get("loop"), str) or not loops.is_loop_name(data["loop"]):
        raise ApiError(400, "give the loop's name")
    paths = loops.LoopPaths(project / ".loopwright", data["loop"])
    if pick.config(paths).get("status") != loops.ACTIVE:
        raise ApiError(409, f"loop {data['loop']} is not active")
    m.runs.stop(None, paths)
    return JSONResponse({"stopping": data["loop"]})


async def answer_gate(request: Request):
    m = request.app.state.monitor
    data = await body(request)
    project = m.project(data.get("project"))
    for key in ("loop", "gate", "answer"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ApiError(400, f"give {key}")
    text = gates.answer_gate(project / ".loopwright", data["loop"], None, data["gate"], data["answer"], {})
    waiting = m.registry.waiting_run(str(project), data["loop"])
    if waiting is not None:  # its runner left to wait for this answer: drive the loop again
        m.runs.resume(waiting)
    return JSONResponse({"result": text})


def _trusted(request: Request):
    """The paths and loop.json of the loop a request names, only if this user's loopwright
    signed it (a name, never a path: serve/files.py)."""
    m = request.app.state.monitor
    project = m.project_or_only(request.query_params.get("project"))
    try:
        return files.trusted_loop(project / ".loopwright", request.path_params["name"])
    except files.Refused as exc:
        raise ApiError(exc.status, str(exc)) from None


def _doc(request: Request, which: str):
    paths, _ = _trusted(request)
    text = files.read_doc(paths.report if which == "report" else paths.handoff)
    if text is None:
        raise ApiError(404, f"loop {paths.name} has no {which}.md")
    # The agent wrote it: plain text the browser must not sniff into HTML.
    headers = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox", **NO_STORE}
    return PlainTextResponse(text, headers=headers)


async def loop_report(request: Request):
    return _doc(request, "report")


async def loop_handoff(request: Request):
    return _doc(request, "handoff")


async def loop_history(request: Request):
    """A slice of the loop's iterations, read back from byte ``before`` (default: the end)."""
    paths, cfg = _trusted(request)
    before = count(request.query_params.get("before"), "before")
    limit = count(request.query_params.get("limit"), "limit") or 50
    return JSONResponse(files.history_slice(paths, cfg, before, limit))


async def task_auto(request: Request):
    m = request.app.state.monitor
    session = request.path_params["session"]
    if request.method == "GET":
        row = m.registry.live_for(session=session)
        if row is None:
            raise ApiError(404, "no task-auto run in this session")
        return JSONResponse({"run": row})
    if request.method == "DELETE":
        row = m.registry.live_for(session=session)
        if row is None:
            raise ApiError(404, "no task-auto run in this session")
        return JSONResponse({"run": _stop(m, row)})
    data = await body(request)
    project, module = m.task_dir(data.get("taskDir"))
    what = f"/loopwright:task auto {module}"
    row = m.runs.start(
        str(project), what, limits_of(data), session=session, task_dir=str(project / "TASK" / module)
    )
    return JSONResponse({"run": row}, status_code=201)


async def lookup(request: Request):
    m = request.app.state.monitor
    project, module = m.task_dir(request.query_params.get("taskDir"))
    row = m.registry.live_for(task_dir=str(project / "TASK" / module))
    if row is None:
        raise ApiError(404, "no live run for this task directory")
    return JSONResponse({"run": row})


async def events(request: Request):
    """This machine's loops (``loops``, looked at every second) and the fleet (``fleet``, sent
    when the registry's notifications or its slow poll say it changed)."""
    m = request.app.state.monitor

    async def stream():
        last, sent, looked = None, None, 0.0
        wake = m.fleet.subscribe()
        try:
            while not m.closing and not await request.is_disconnected():
                if m.fleet.version != sent:  # first: on a fleet's monitor it is most of the page
                    try:
                        sent, fleet = await asyncio.to_thread(m.fleet.current)
                        yield f"event: fleet\ndata: {fleet}\n\n"
                    except RegistryError:
                        sent = m.fleet.version  # the database is away: its next change comes
                if time.monotonic() - looked >= 1.0:
                    looked, now = time.monotonic(), await _loops_text(m)
                    if now is not None and now != last:
                        last = now
                        yield f"event: loops\ndata: {now}\n\n"
                await wake.wait(1.0)
        finally:
            m.fleet.unsubscribe(wake)

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


async def _loops_text(m: Monitor) -> str | None:
    """This machine's loops as JSON; None while the database is away (the stream goes on)."""
    try:
        return jsoncodec.dumps(await asyncio.to_thread(m.loops)).decode()
    except RegistryError:
        return None


def make_app(monitor: Monitor) -> Starlette:
    routes = [
        Route("/api/loops", list_loops, methods=["GET"]),
        Route("/api/loops", start_loop, methods=["POST"]),
        Route("/api/runs/{run_id}", stop_run, methods=["DELETE"]),
        Route("/api/gates", answer_gate, methods=["POST"]),
        Route("/api/loops/stop", stop_loop, methods=["POST"]),
        Route("/api/loops/{name}/history", loop_history, methods=["GET"]),
        Route("/api/loops/{name}/report", loop_report, methods=["GET"]),
        Route("/api/loops/{name}/handoff", loop_handoff, methods=["GET"]),
        Route("/api/sessions/{session}/task-auto", task_auto, methods=["GET", "POST", "DELETE"]),
        Route("/api/task-auto/lookup", lookup, methods=["GET"]),
        Route("/api/events", events, methods=["GET"]),
        *fleetapi.ROUTES,
        *metrics.ROUTES,
        Route("/", index, methods=["GET"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/login/proof", login_proof, methods=["GET"]),
    ]
    handlers = {
        ApiError: lambda request, exc: error(exc.status, str(exc)),
        Busy: lambda request, exc: error(409, str(exc)),
        RegistryError: lambda request, exc: error(503, str(exc)),
        UserError: lambda request, exc: error(400, str(exc)),
    }
    app = Starlette(routes=routes, exception_handlers=handlers)
    app.state.monitor = monitor
    return _guarded(app, monitor)


def _stop(m: Monitor, row: dict) -> dict:
    if not row.get("loop"):
        raise ApiError(409, "the run has not started its loop yet; try again in a moment")
    paths = loops.LoopPaths(Path(row["project"]) / ".loopwright", row["loop"])
    m.runs.stop(row, paths)
    return m.registry.get(row["id"])


COOKIE = "loopwright_session"
CSRF_HEADER = "x-loopwright-csrf"
SAFE_METHODS = ("GET", "HEAD")


def _allowed(request: Request, m: Monitor) -> str | None:
    """Why ``request`` may not go on (None: it may). The API takes the bearer token; the
    page's cookie works too, and then a state-changing call must carry the page's CSRF token."""
    given = request.headers.get("authorization", "")
    if given and hmac.compare_digest(given.encode(), f"Bearer {m.token}".encode()):
        return None
    csrf = m.sessions.get(request.cookies.get(COOKIE, ""))
    if csrf is None:
        return "give the monitor's token: Authorization: Bearer <token>"
    if request.method not in SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), csrf.encode()):
            return "this call needs the page's CSRF token"
    return None


# same-origin, not no-referrer: with no-referrer the Sign in POST would carry "Origin: null"
NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "same-origin"}


async def login(request: Request):
    """The sign-in link. Its GET only shows a Sign in button (a chat app's or browser's
    preview fetches links, and must not use one up); the button's POST uses the code."""
    m = request.app.state.monitor
    if request.method == "GET":
        code = request.query_params.get("code", "")
        if not m.login_valid(code, consume=False):
            return HTMLResponse(page.LOGIN_USED, status_code=401, headers=NO_STORE)
        return HTMLResponse(page.sign_in(code), headers=NO_STORE)
    origin = request.headers.get("origin")
    if origin is not None and origin != f"http://{request.headers.get('host', '')}":
        return HTMLResponse(page.LOGIN_FOREIGN, status_code=403, headers=NO_STORE)  # another site's form
    form = urllib.parse.parse_qs((await body_bytes(request)).decode("utf-8", errors="replace"))
    if not m.login_valid((form.get("code") or [""])[0], consume=True):
        return HTMLResponse(page.LOGIN_USED, status_code=401, headers=NO_STORE)
    cookie, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    m.sessions[cookie] = csrf
    res = RedirectResponse("/", status_code=303)
    res.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path="/")
    return res


async def login_proof(request: Request):
    """`serve --login` asks this before printing a link: only a monitor holding the token can
    answer (serve/logins.py)."""
    m = request.app.state.monitor
    challenge = request.query_params.get("challenge", "")
    if not 16 <= len(challenge) <= 64:
        return PlainTextResponse("give a challenge of 16 to 64 characters", status_code=400)
    return PlainTextResponse(logins.proof(m.token, challenge), headers=NO_STORE)


async def index(request: Request):
    m = request.app.state.monitor
    csrf = m.sessions.get(request.cookies.get(COOKIE, ""))
    if csrf is None:
        return HTMLResponse(page.LOGIN_NEEDED, status_code=401)
    return HTMLResponse(page.render(csrf), headers={"Cache-Control": "no-store"})


def _guarded(app, m: Monitor):
    """Loopback only, the token (or the page's cookie and CSRF token) on every API call, no
    body over the limit."""

    async def guarded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        request = Request(scope, receive)
        client = (scope.get("client") or ("", 0))[0]
        if client not in LOOPBACK:
            return await error(403, "the monitor answers only on this machine")(scope, receive, send)
        if scope["path"].startswith("/api/"):
            why = _allowed(request, m)
            if why is not None:
                status = 403 if "CSRF" in why else 401
                return await error(status, why)(scope, receive, send)
        length = request.headers.get("content-length") or "0"
        if not length.isdigit() or int(length) > MAX_BODY:
            return await error(413, f"the body is larger than {MAX_BODY} bytes")(scope, receive, send)
        return await app(scope, receive, send)

    return guarded
