"""A claim reconciles the database with the loop's branch (lib/loopwright/fleet/reconcile.py),
against a real bare repository and both databases: what a worker pushed and never recorded is
recorded once, onto the row, the day's spend and the carried counters; hostile commits add
nothing of another loop's and never lower a figure; spend that leaves no room ends the loop."""

from __future__ import annotations

import threading

from test_workspace import make_remote

from loopwright.fleet import ledger, reconcile
from loopwright.fleet.workspace import Workspace

SONNET = "claude-sonnet-4-5"
USAGE = {"input_tokens": 62_500, "output_tokens": 12_500, "cache_creation_input_tokens": 0,
         "cache_read_input_tokens": 0}  # fmt: skip
COUNTERS = {"iterations_used": 1, "tokens_in": 62_500, "tokens_out": 12_500, "minutes_elapsed": 1.0,
            "dollars_estimate": 0.375, "tokens_by_model": {SONNET: dict(USAGE)}}  # fmt: skip


class Worker:
    def __init__(self, registry) -> None:
        self.registry, self.lines = registry, []

    def log(self, event, **fields) -> None:
        self.lines.append(dict(fields, event=event))


class Claim:
    """What reconcile.recover reads of a slot: its claim's row, workspace and writes."""

    def __init__(self, registry, row: dict, ws: Workspace) -> None:
        self.w, self.row, self.ws = Worker(registry), row, ws
        self.id, self.gen, self.name = row["id"], row["generation"], row["name"]
        self.recorded, self.counted = float(row["dollars"]), reconcile.carried(row)
        self.lost = threading.Event()

    def _retrying(self, call, *args, **fields):
        return call(*args, **fields)

    def _write(self, call, *args, **fields):
        return call(self.id, self.gen, *args, **fields)


def ran_one_iteration(reg, tmp_path, limits=None):
    """A loop whose first worker recorded iteration 1 (commit ``head``) and then went away;
    its row claimed again, and a workspace of the new claim's on the branch (not pushed to)."""
    url = make_remote(tmp_path)
    spec = {"goal": "g", **({"limits": limits} if limits else {})}
    loop = reg.submit(kind="prompt", spec=spec, repo=url, name="osprey")
    first = reg.claim("w1", "h", lease=600)
    ws = Workspace(tmp_path / "w1", "osprey", url)
    ws.prepare()
    rec = ledger.record(loop["id"], 1, COUNTERS, {}, 0.375)
    ws.commit_all(f"loopwright osprey: iteration 1\n\n{ledger.trailers(rec)}", allow_empty=True)
    head = ws.push(None)
    state = {"counters": COUNTERS, "head": head}
    reg.record_spend(
        loop["id"], 1, 0.375, iteration=1, tokens=75_000, dollars=0.375, minutes=1.0, state=state
    )
    return loop, first, ws


def push(ws: Workspace, loop_id: str, iteration: int, dollars: float, message: str | None = None) -> str:
    budget = dict(COUNTERS, tokens_in=125_000, tokens_out=25_000, minutes_elapsed=2.0,
                  tokens_by_model={SONNET: {k: 2 * v for k, v in USAGE.items()}})  # fmt: skip
    rec = ledger.record(loop_id, iteration, budget, COUNTERS, dollars)
    ws.commit_all(
        message or f"loopwright osprey: iteration {iteration}\n\n{ledger.trailers(rec)}", allow_empty=True
    )
    return ws.push(ws.remote_seen)


def take_over(reg, loop, tmp_path, who="w2") -> Claim:
    """The next claim, once the worker holding the loop went away; its workspace prepared."""
    with reg.backend.tx() as tx:
        tx.run("UPDATE fleet_loops SET lease_expires = {now} - 1 WHERE id = %s", (loop["id"],))
    row = reg.claim(who, "h", lease=600)
    ws = Workspace(tmp_path / who, "osprey", row["repo"])
    ws.prepare()
    return Claim(reg, row, ws)


def test_a_push_never_recorded_is_recorded_by_the_next_claim_once(reg, tmp_path):
    loop, _, ws = ran_one_iteration(reg, tmp_path)
    tip = push(ws, loop["id"], 2, 0.375)  # pushed; its worker died before recording it
    claim = take_over(reg, loop, tmp_path)
    assert reconcile.recover(claim) is None
    row = reg.fleet_loop("osprey")
    assert (row["iteration"], row["tokens"], row["dollars"], row["minutes"]) == (2, 150_000, 0.75, 2.0)
    assert row["state"]["head"] == tip and row["state"]["counters"]["iterations_used"] == 2
    assert row["state"]["counters"]["tokens_by_model"][SONNET]["input_tokens"] == 125_000
    assert reg.spend_today() == 0.75
    assert (claim.recorded, claim.counted["tokens_in"], claim.row["iteration"]) == (0.75, 125_000, 2)
    events = [e["data"] for e in reg.events(loop["id"]) if e["kind"] == "iteration"]
    assert events[-1]["iteration"] == 2 and events[-1]["reason"].startswith("recovered from the branch")
    # The next claim finds the tip recorded: nothing is counted twice.
    again = take_over(reg, loop, tmp_path, who="w3")
    assert reconcile.recover(again) is None
    assert reg.fleet_loop("osprey")["dollars"] == 0.75 and reg.spend_today() == 0.75


def test_what_others_push_to_the_branch_never_lowers_a_figure_nor_counts_for_another_loop(reg, tmp_path):
    loop, _, ws = ran_one_iteration(reg, tmp_path)
    push(ws, loop["id"], 2, 0.375)
    # The agent, or anyone who can push, adds commits: another loop's record, a record of the
    # same iteration with lower figures, and prose that looks like a trailer.
    push(ws, "another-loop-id", 3, 50.0)
    low = ledger.trailers(dict(ledger.record(loop["id"], 2, COUNTERS, COUNTERS, 0.0)))
    push(ws, loop["id"], 2, 0.0, message=f"a fix\n\n{low}")
    push(ws, loop["id"], 9, 1.0, message=f"notes\n\nLoopwright-Loop: {loop['id']}\nLoopwright-Iteration: 9x")
    claim = take_over(reg, loop, tmp_path)
    assert reconcile.recover(claim) is None
    row = reg.fleet_loop("osprey")
    assert (row["iteration"], row["dollars"], row["tokens"]) == (2, 0.75, 150_000)


def test_recovered_spend_that_leaves_no_room_ends_the_loop(reg, tmp_path):
    loop, _, ws = ran_one_iteration(reg, tmp_path)
    push(ws, loop["id"], 2, 0.375)
    # Room for the claim (its first two iterations at $0.375 on $0.375 spent), none after the
    # recovered $0.375.
    reg.set_limits("fleet", max_dollars_per_day=1.2)
    claim = take_over(reg, loop, tmp_path)
    why = reconcile.recover(claim)
    assert why.startswith("the fleet's daily budget of $1.20 would be passed by another iteration"), why
    assert reg.spend_today() == 0.75


def test_a_recovery_is_bounded_by_the_loops_own_ceiling(reg, tmp_path):
    loop, _, ws = ran_one_iteration(reg, tmp_path, limits={"max_dollars": 2.0, "max_iterations": 4})
    push(ws, loop["id"], 2, 0.375)
    push(ws, loop["id"], 50, 90_000.0)  # forged: far past what the loop may spend or do
    claim = take_over(reg, loop, tmp_path)
    reconcile.recover(claim)
    row = reg.fleet_loop("osprey")
    assert (row["iteration"], row["dollars"]) == (4, 0.375 + 2.0)
