"""A fleet gate's answer as one write: the gate answered (by whom), the loop queued again to go on
with whichever worker claims it next, its ceilings raised when the answer raised them (the
spec's limits, which every claim starts its runner with), and the answer in the loop's
timeline. The caller read the row and decided (serve/fleetapi.py); the write goes in only while
the row is as it read it, so that a decision is never made on a row that changed meanwhile."""

from __future__ import annotations

from loopwright.registry.queue import CONTROL_CHANNEL, PROGRESS_CHANNEL, QUEUE_CHANNEL, json_text, loop_row

ANSWERED = (
    "UPDATE fleet_loops SET gate = %s, spec = COALESCE(%s, spec), status = 'queued', worker = NULL, "
    "lease_expires = NULL, updated_at = {now} WHERE id = %s AND status = 'waiting_gate' AND updated_at = %s"
)
EVENT = "INSERT INTO fleet_events (loop_id, at, generation, kind, data) VALUES (%s, {now}, %s, 'gate', %s)"


class GateAnswers:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def record_gate_answer(
        self, row: dict, answer: str, by: str, *, user: str | None = None, spec=None, raised=None
    ) -> dict | None:
        """Answers the gate ``row`` (as read) waits at with ``answer``, given ``by`` (page, api,
        cli) by ``user``; ``spec`` replaces the loop's spec (raised ceilings, ``raised``: {key:
        [old, new]}). The row after; None when it changed since it was read."""
        gate = dict(row.get("gate") or {})
        with self.backend.tx() as tx:
            at = tx.one("SELECT {now} AS now")["now"]
            gate.update(answer=answer, by=by, answered_at=at, **({"user": user} if user else {}))
            if raised:
                gate["raised"] = raised
            args = (json_text(gate), None if spec is None else json_text(spec), row["id"], row["updated_at"])
            if tx.run(ANSWERED, args) != 1:
                return None
            event = {"gate": gate.get("name"), "question": gate.get("question"), "answer": answer, "by": by}
            event.update({"user": user} if user else {}, **({"raised": raised} if raised else {}))
            tx.run(EVENT, (row["id"], int(row.get("generation") or 0), json_text(event)))
            for channel in (CONTROL_CHANNEL, QUEUE_CHANNEL, PROGRESS_CHANNEL):
                self.backend.notify(tx, channel, row["id"])
            return loop_row(tx.one("SELECT * FROM fleet_loops WHERE id = %s", (row["id"],)))
