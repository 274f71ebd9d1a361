"""`GET /metrics`: the fleet and this machine's loops in Prometheus's text format, for a
Prometheus to scrape and a Grafana to chart (docs/monitor.md).

On the monitor's own port it takes the API's bearer token; with `serve --metrics-public` it is
also served without one on a port of its own, which answers nothing else. Every number is read
from where it is kept at each scrape (registry/fleetnumbers.py, serve/localhistory.py), never
counted in this process: a restarted monitor, or a second one, gives the same totals.

What the database holds is whatever its writers put there: a label's value is cut to a printable
line of bounded length, and a family has a bounded number of series (the rest summed under
``(other)``), so no row can make a scrape grow without end."""

from __future__ import annotations

import hmac
import threading
import time
import weakref

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from loopwright.core.durations import Histogram
from loopwright.registry import RegistryError
from loopwright.registry.fleetnumbers import IterationTail, fleet_numbers
from loopwright.registry.fleetview import STATUSES
from loopwright.serve.localhistory import LocalHistory
from loopwright.serve.requests import error

# The text format every Prometheus reads (the library's newest default names a later version).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_SERIES = 200  # per family
MAX_LABEL = 100  # characters of a label's value
OTHER = "(other)"


def label(value) -> str:
    text = "" if value is None else str(value)
    return "".join(c if c.isprintable() else "?" for c in text[:MAX_LABEL])


def bounded(values: dict, limit: int = MAX_SERIES, keep=()) -> dict:
    """``values`` ({label: number}) with at most ``limit`` entries: ``keep`` and the largest,
    the rest summed under OTHER."""
    if len(values) <= limit:
        return dict(values)
    order = sorted(values, key=lambda k: (k not in keep, -values[k], k))
    out = {k: values[k] for k in order[: limit - 1]}
    out[OTHER] = out.get(OTHER, 0) + sum(values[k] for k in order[limit - 1 :])
    return out


def _loops(fleet: dict) -> GaugeMetricFamily:
    """By status (a status no loopwright writes counts under OTHER) and account (the accounts
    with the most loops; the rest under OTHER): at most MAX_SERIES series."""
    family = GaugeMetricFamily(
        "loopwright_loops", "Fleet loops by status and account.", labels=["status", "account"]
    )
    per_account: dict = {}
    for _, account, n in fleet["loops"]:
        per_account[label(account)] = per_account.get(label(account), 0) + n
    shown = bounded(per_account, MAX_SERIES // (len(STATUSES) + 1))
    counts: dict = {}
    for status, account, n in fleet["loops"]:
        key = (status if status in STATUSES else OTHER, label(account) if label(account) in shown else OTHER)
        counts[key] = counts.get(key, 0) + n
    for key, n in sorted(counts.items()):
        family.add_metric(list(key), n)
    return family


def _by(name: str, doc: str, key: str, values: dict, counter=False, keep=()):
    kind = CounterMetricFamily if counter else GaugeMetricFamily
    family = kind(name, doc, labels=[key])
    shown: dict = {}
    for k, v in values.items():
        shown[label(k)] = shown.get(label(k), 0) + v
    for k, v in sorted(bounded(shown, keep=keep).items()):
        family.add_metric([k], v)
    return family


def _histogram(parts: dict[str, Histogram]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(
        "loopwright_iteration_seconds",
        "How long iterations took (fleet: the timeline's iteration events; local: history.jsonl).",
        labels=["where"],
    )
    for where, h in parts.items():
        family.add_metric([where], h.cumulative(), h.sum)
    return family


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def families(fleet: dict, durations: dict[str, Histogram], took: float) -> list:
    """The metric families of one scrape: ``fleet`` as fleet_numbers reads it, the iteration
    durations by where they ran, and how long reading them took."""
    iterations = CounterMetricFamily(
        "loopwright_iterations_total", "Iterations recorded (fleet loops' rows; local histories).",
        labels=["where"],
    )  # fmt: skip
    iterations.add_metric(["fleet"], fleet["iterations"])
    iterations.add_metric(["local"], durations["local"].iterations)
    slots = GaugeMetricFamily("loopwright_worker_slots", "Slots of the live workers.", labels=["use"])
    slots.add_metric(["used"], fleet["slots_used"])
    slots.add_metric(["free"], max(0, fleet["slots"] - fleet["slots_used"]))
    return [
        _loops(fleet),
        _by("loopwright_loops_ended_total", "Fleet loops ended, by outcome.", "outcome",
            fleet["ended"], counter=True),
        _by("loopwright_workers", "Fleet workers by state (alive, stale, stopped).", "state",
            fleet["workers"]),
        slots,
        _by("loopwright_spend_dollars_today", "Dollars spent today (UTC, the database's clock) by scope.",
            "scope", fleet["spend"], keep=("fleet",)),
        _by("loopwright_fleet_cap_dollars", "Daily dollar caps by scope.", "scope", fleet["caps"],
            keep=("fleet",)),
        _by("loopwright_held_dollars", "Dollars running loops hold for iterations begun and not recorded "
            "yet, by capped scope (a claim counts them as spent).", "scope", fleet["held"], keep=("fleet",)),
        iterations,
        _counter("loopwright_failovers_total", "Fleet loops taken over after their worker went away.",
                 fleet["failovers"]),
        _counter("loopwright_claims_total", "Claims of fleet loops by workers.", fleet["claims"]),
        _gauge("loopwright_gates_waiting", "Fleet loops waiting at a gate for an answer.", fleet["gates"]),
        _gauge("loopwright_workers_quiet", "Workers that went quiet: stale, or stopped without saying "
               "so (the page's count; one that said it left is not).", fleet["quiet"]),
        _histogram(durations),
        _gauge("loopwright_metrics_read_seconds", "Seconds this scrape took to read its numbers.", took),
    ]  # fmt: skip


class Numbers(Collector):
    """What one monitor exposes: read afresh at each scrape, one scrape at a time."""

    def __init__(self, registry, projects) -> None:
        self.registry = registry
        self.fleet_tail = IterationTail()
        self.local = LocalHistory(projects)
        self.prometheus = CollectorRegistry(auto_describe=False)
        self.prometheus.register(self)
        self._lock = threading.Lock()

    def collect(self):
        started = time.monotonic()
        fleet = fleet_numbers(self.registry)
        durations = {"fleet": self.fleet_tail.read(self.registry), "local": self.local.read()}
        yield from families(fleet, durations, time.monotonic() - started)

    def render(self) -> bytes:
        with self._lock:
            return generate_latest(self.prometheus)


_NUMBERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # monitor -> its Numbers
_NUMBERS_LOCK = threading.Lock()


def numbers_of(monitor) -> Numbers:
    with _NUMBERS_LOCK:
        if monitor not in _NUMBERS:
            _NUMBERS[monitor] = Numbers(monitor.registry, monitor.projects)
        return _NUMBERS[monitor]


async def answer(monitor) -> Response:
    try:
        text = await run_in_threadpool(numbers_of(monitor).render)
    except RegistryError as exc:
        return error(503, str(exc))
    return Response(text, media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})


async def scrape(request: Request) -> Response:
    """`GET /metrics` on the monitor's port: the API's bearer token, as every API call."""
    monitor = request.app.state.monitor
    given = request.headers.get("authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {monitor.token}".encode()):
        return error(401, "give the monitor's token: Authorization: Bearer <token> (see docs/monitor.md)")
    return await answer(monitor)


ROUTES = [Route("/metrics", scrape, methods=["GET"])]


def with_public_port(app, monitor, port: int):
    """``app``, and on the connections to ``port`` (serve --metrics-public) only `GET /metrics`,
    with no token."""

    async def open_scrape(request: Request) -> Response:
        return await answer(monitor)

    public = Starlette(routes=[Route("/metrics", open_scrape, methods=["GET"])])

    async def dispatch(scope, receive, send):
        server = scope.get("server") or ("", None)
        if scope["type"] in ("http", "websocket") and server[1] == port:
            return await public(scope, receive, send)
        return await app(scope, receive, send)

    return dispatch
