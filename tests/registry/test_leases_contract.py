"""A worker's leases renewed together (registry/leases.py, fleet/worker.py), on the embedded
SQLite registry and on a real PostgreSQL: one renewal renews every claim the worker still holds
with the generation it holds it by, never a claim another worker took since (fencing), and a
worker's beat costs the database the same few statements however many loops it holds."""

from __future__ import annotations

import io

from loopwright.fleet.slot import Slot
from loopwright.fleet.worker import Options, Worker
from waiting import wait_for


def submit(reg, name: str) -> dict:
    return reg.submit(kind="prompt", spec={"goal": "g"}, repo="https://example.com/r.git", name=name)


def test_one_renewal_renews_each_claim_still_held_and_not_one_another_worker_took(reg):
    rows = {n: submit(reg, n) for n in ("kept", "asked", "taken")}
    for name in ("kept", "asked"):
        assert reg.claim("w1", "a", lease=30)["id"] == rows[name]["id"]
    assert reg.claim("w1", "a", lease=0.2)["id"] == rows["taken"]["id"]
    # Its lease runs out: another worker takes the loop (generation 2), the first one is away.
    taken = wait_for(lambda: reg.claim("w2", "b", lease=30), "the lease to run out", within=60)
    assert (taken["id"], taken["generation"]) == (rows["taken"]["id"], 2)
    rows["released"] = submit(reg, "released")
    assert reg.claim("w1", "a", lease=30)["id"] == rows["released"]["id"]
    reg.release(rows["released"]["id"], 1, "draining")
    reg.request("asked", "stop")
    before = {n: reg.fleet_loop(r["id"]) for n, r in rows.items()}

    held = reg.renew_claims([(r["id"], 1) for r in rows.values()], lease=600)

    assert held == {rows["kept"]["id"]: None, rows["asked"]["id"]: "stop"}
    after = {n: reg.fleet_loop(r["id"]) for n, r in rows.items()}
    for name in ("kept", "asked"):
        assert after[name]["lease_expires"] > before[name]["lease_expires"] + 500
        assert (after[name]["generation"], after[name]["worker"]) == (1, "w1")
        assert after[name]["updated_at"] == before[name]["updated_at"]  # a renewal is no news
    assert after["taken"] == before["taken"]  # fenced: the other worker's claim is untouched
    assert after["released"] == before["released"]
    assert reg.renew_claims([], lease=600) == {}


class CountedStatements:
    """Every statement the registry sends (each passes once through the backend's render)."""

    def __init__(self, backend) -> None:
        self.count, self._render = 0, backend.render

    def __call__(self, sql: str) -> str:
        self.count += 1
        return self._render(sql)


def test_a_worker_beat_costs_the_same_statements_for_one_loop_as_for_many(reg, tmp_path, monkeypatch):
    costs = {}
    for n in (1, 12):
        names = [f"n{n}-{i}" for i in range(n)]
        for name in names:
            submit(reg, name)
        opts = Options(n, ["*"], tmp_path / f"w{n}", name=f"w{n}", lease=600.0)
        worker = Worker(reg, opts, out=io.StringIO())
        claims = [reg.claim(f"w{n}", "a", lease=5) for _ in names]
        for row in claims:
            worker.slots[row["id"]] = Slot(worker, row)  # not started: the worker's beat alone
        counted = CountedStatements(reg.backend)
        monkeypatch.setattr(reg.backend, "render", counted)
        worker._beat()
        monkeypatch.undo()
        costs[n] = counted.count
        renewed = [reg.fleet_loop(r["id"])["lease_expires"] - r["lease_expires"] for r in claims]
        assert min(renewed) > 500, "every claim of the worker renewed by its beat"
    assert costs[12] == costs[1], costs
