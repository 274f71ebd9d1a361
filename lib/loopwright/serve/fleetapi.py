"""The monitor's REST API for the fleet: the fleet at a glance, one loop in full, its timeline
in bounded slices, a loop submitted with `POST /api/loops` and a "repo", stop, cancel and a
gate's answer. Every call goes through the same token, sign-in and CSRF checks as the rest of
the API (app.py); the registry NOTIFYs the worker holding a loop of its stop, cancel or answer.

Registry calls block (a database round trip), so they run on Starlette's thread pool, never on
the event loop that serves the page's stream."""

from __future__ import annotations

import getpass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from loopwright.core import gates, raising
from loopwright.core.gates import BUDGET_ESCALATION
from loopwright.fleet import allow
from loopwright.fleet import spec as specs
from loopwright.fleet.consent import Takers
from loopwright.registry import RegistryError
from loopwright.serve.fleetwatch import detail, slim, snapshot
from loopwright.serve.requests import ApiError, body, count

EVENTS_LIMIT = 100  # a timeline slice when none is asked for
MAX_EVENTS = 500  # the most one slice holds
MAX_TAGS = 32
MAX_ANSWER = gates.MAX_ANSWER
# camelCase names the local API already takes for the same limits (app.limits_of)
ALIASES = {"maxIterations": "max_iterations", "timeout": "max_minutes", "maxDollars": "max_dollars"}
FIELDS = {"repo", "goal", "mode", "args", "branch", "name", "account", "tags", "limits"}
OPTIONS = specs.OPTIONS  # as `loopwright submit` takes them


async def fleet_view(request: Request):
    """The fleet now (read fresh: the page's stream shares one snapshot per change instead)."""
    m = request.app.state.monitor
    return JSONResponse(await run_in_threadpool(snapshot, m.registry), headers={"Cache-Control": "no-store"})


def _row(m, request: Request) -> dict:
    loop = request.path_params["loop"]
    row = m.registry.fleet_loop(loop) if 0 < len(loop) <= 200 else None
    if row is None:
        raise ApiError(404, f"no fleet loop {loop[:80]!r}: GET /api/fleet lists them")
    return row


async def fleet_loop(request: Request):
    m = request.app.state.monitor
    row = await run_in_threadpool(_row, m, request)
    return JSONResponse({"loop": detail(row)}, headers={"Cache-Control": "no-store"})


async def fleet_events(request: Request):
    """The loop's timeline from the event after ``after`` (an event id), oldest first, at most
    ``limit`` (up to 500) at a time; ``next`` is the ``after`` of the slice that follows."""
    m = request.app.state.monitor
    after = count(request.query_params.get("after"), "after") or 0
    limit = count(request.query_params.get("limit"), "limit") or EVENTS_LIMIT
    if limit > MAX_EVENTS:
        raise ApiError(400, f"limit must be at most {MAX_EVENTS}")

    def read():
        row = _row(m, request)
        return row, m.registry.events(row["id"], after, limit)

    row, found = await run_in_threadpool(read)
    last = found[-1]["id"] if found else after
    return JSONResponse({"loop": row["id"], "events": found, "next": last, "more": len(found) == limit})


def _steer(what: str):
    async def steer(request: Request):
        m = request.app.state.monitor

        def ask():
            row = _row(m, request)
            if row["status"] == "ended":
                raise ApiError(409, f"fleet loop {row['name']} has ended already ({row['outcome']})")
            return m.registry.request(row["id"], what)

        row = await run_in_threadpool(ask)
        m.fleet.changed()
        return JSONResponse({"asked": what, "loop": slim(row)})

    return steer


async def fleet_gate(request: Request):
    """Answers the gate the loop waits at: it is queued again, to go on with whichever worker
    claims it next. The answer must be one of the gate's options when the gate names them;
    ``raise`` (budget-escalation) takes the new ceilings in ``raise_to`` ({"max_dollars": 20}),
    or raises each by half as much again, and they hold from the next claim on. The answer goes
    into the loop's timeline with who gave it."""
    m = request.app.state.monitor
    data = await body(request)
    answer = data.get("answer")
    if not isinstance(answer, str) or not answer.strip() or len(answer) > MAX_ANSWER:
        raise ApiError(400, f"give the answer (up to {MAX_ANSWER} characters): one of the gate's options")
    raise_to = data.get("raise_to")
    if raise_to is not None and (not isinstance(raise_to, dict) or answer != "raise"):
        raise ApiError(400, 'raise_to goes only with the answer "raise", as {"max_dollars": 20}')
    by = "api" if request.headers.get("authorization") else "page"

    def reply():
        row = _row(m, request)
        spec, raised = _answerable(row, answer, raise_to)
        done = m.registry.record_gate_answer(row, answer, by, user=_user(), spec=spec, raised=raised)
        if done is None:  # answered, stopped or moved on meanwhile
            raise ApiError(409, f"the gate of fleet loop {row['name']} no longer waits as it did: look again")
        return done

    row = await run_in_threadpool(reply)
    m.fleet.changed()
    return JSONResponse({"answered": answer, "loop": slim(row)})


def _answerable(row: dict, answer: str, raise_to: dict | None) -> tuple[dict | None, dict | None]:
    """The loop's new spec and the ceilings raised (both None but for a raise) when ``answer``
    may be given to the gate ``row`` waits at; ApiError otherwise."""
    gate = row.get("gate") if isinstance(row.get("gate"), dict) else {}
    if row["status"] != "waiting_gate" or gate.get("answer"):
        raise ApiError(409, f"no gate waits in fleet loop {row['name']} (it is {row['status']})")
    problem = gates.fleet_answer_problem(gate, answer)
    if problem:
        raise ApiError(400, problem)
    if answer != "raise" or gate.get("name") != BUDGET_ESCALATION:
        return None, None
    try:
        limits, raised = raising.raised(row, gate, raise_to)
        spec = dict(row.get("spec") if isinstance(row.get("spec"), dict) else {}, limits=limits)
        specs.runner_args(row["kind"], spec)  # a ceiling a worker would refuse is refused now
    except (raising.RaiseError, specs.SpecError) as exc:
        raise ApiError(400, str(exc)) from None
    return spec, raised


def _user() -> str | None:
    """Who answers from this monitor: the user it runs as (the page and the token are theirs)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid
        return None


def _fleet_spec(data: dict) -> tuple[str, dict]:
    """The kind and spec of a loop submitted through the API, checked as a worker would check it."""
    unknown = sorted(set(data) - FIELDS - set(OPTIONS) - set(specs.LIMITS) - set(ALIASES))
    if unknown:
        raise ApiError(400, f"unknown field {unknown[0]!r} for a fleet loop")
    limits = data.get("limits") if data.get("limits") is not None else {}
    if not isinstance(limits, dict):
        raise ApiError(400, "limits must be a JSON object")
    limits = dict(limits)
    for key in (*specs.LIMITS, *ALIASES):
        if data.get(key) is not None:
            limits[ALIASES.get(key, key)] = data[key]
    spec = {"limits": limits, **{k: data[k] for k in OPTIONS if data.get(k) is not None}}
    if data.get("mode") is not None:
        if data["mode"] not in specs.MODES:
            raise ApiError(400, f"unknown mode {str(data['mode'])[:40]!r}: use {', '.join(specs.MODES)}")
        if data.get("goal") is not None:
            raise ApiError(400, 'give a "goal" or a "mode" with its "args", not both')
        kind, spec["args"] = data["mode"], data.get("args") if data.get("args") is not None else []
    else:
        kind, spec["goal"] = "prompt", data.get("goal")
    try:
        specs.runner_args(kind, spec)  # what a worker would refuse is refused now
    except specs.SpecError as exc:
        raise ApiError(400, str(exc)) from None
    return kind, spec


def _tags(value) -> list[str]:
    tags = [] if value is None else value
    ok = isinstance(tags, list) and len(tags) <= MAX_TAGS
    if not ok or not all(isinstance(t, str) and t and t.isprintable() and len(t) <= 64 for t in tags):
        raise ApiError(400, f"tags must be a list of up to {MAX_TAGS} names (printable, up to 64 characters)")
    return tags


async def submit(request: Request, data: dict):
    """`POST /api/loops` with a "repo": a new queued fleet loop (as `loopwright submit`)."""
    m = request.app.state.monitor
    kind, spec = _fleet_spec(data)
    if isinstance(data.get("repo"), str) and allow.refused(data["repo"]):
        raise ApiError(
            400, f"bad repository: {allow.refused(data['repo'])}; give a URL or absolute path git clones"
        )
    tags = _tags(data.get("tags"))
    account = data.get("account") if data.get("account") is not None else "default"

    def queue():
        name = data.get("name")
        if isinstance(name, str) and m.registry.fleet_loop(name) is not None:
            raise ApiError(409, f"a fleet loop named {name} exists already: choose another name")
        # A repository or verify no live worker accepts is refused, as by `loopwright submit`.
        repo = data.get("repo")
        unserved = (
            Takers(m.registry.workers()).unserved(repo, spec, account) if isinstance(repo, str) else None
        )
        if unserved and unserved.refuses:
            raise ApiError(409, unserved.line)
        try:
            row = m.registry.submit(
                kind=kind, spec=spec, repo=repo, branch=data.get("branch"),
                account=account, tags=tags, name=name,
            )  # fmt: skip
        except RegistryError as exc:
            raise ApiError(400, str(exc)) from None
        return row, unserved

    row, unserved = await run_in_threadpool(queue)
    m.fleet.changed()
    warning = {"warning": unserved.line} if unserved else {}
    return JSONResponse({"loop": slim(row), **warning}, status_code=201)


ROUTES = [
    Route("/api/fleet", fleet_view, methods=["GET"]),
    Route("/api/fleet/{loop}", fleet_loop, methods=["GET"]),
    Route("/api/fleet/{loop}/events", fleet_events, methods=["GET"]),
    Route("/api/fleet/{loop}/stop", _steer("stop"), methods=["POST"]),
    Route("/api/fleet/{loop}/cancel", _steer("cancel"), methods=["POST"]),
    Route("/api/fleet/{loop}/gate", fleet_gate, methods=["POST"]),
]
