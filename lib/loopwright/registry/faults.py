"""Rows that must not stop or jam the fleet: one a claim cannot take, one a worker cannot prepare.

Whoever can write to the database can write any row. A row whose counters are out of range, or
that the database refuses to update (a numeric overflow, a constraint someone added), is *set
aside* by the claim that meets it: ended ``STOPPED:bad_row`` with the reason in the row and its
timeline, and the claim goes on to the next row. A worker never exits because of a row.

A loop that cannot be prepared (its base branch is missing, its name is not usable as a path, the
repository commits ``.loopwright``, the runner exits without running an iteration) is not claimed
again at once: it waits ``backoff``, then four times that, and the third failure for the same
reason ends it ``STOPPED:prepare_failed`` with the reason in the row and its timeline.
"""

from __future__ import annotations

from loopwright.core.outcomes import stopped
from loopwright.registry.queue import HELD, PROGRESS_CHANNEL, fenced, json_text, lease_lost

BAD_ROW = stopped("bad_row")
PREPARE_FAILED = stopped("prepare_failed")
PREPARE_TRIES = 3  # failures for the same reason that end a loop
BACKOFF_GROWTH = 4  # each wait is this many times the one before
MAX_PASSED_OVER = 10_000  # rows a worker remembers to pass over (ones that refuse to be set aside)

# Only a row that is still claimable is set aside: one another worker took meanwhile is its own.
SET_ASIDE = (
    "UPDATE fleet_loops SET status = 'ended', outcome = %s, reason = %s, worker = NULL, "
    "lease_expires = NULL, updated_at = {now} WHERE id = %s AND (status = 'queued' OR "
    "(status = 'running' AND (lease_expires IS NULL OR lease_expires < {now})))"
)
# The timeline's generation for an event no claim wrote (the row's own may be what is wrong).
EVENT = "INSERT INTO fleet_events (loop_id, at, generation, kind, data) VALUES (%s, {now}, %s, %s, %s)"


def prepare_verdict(last_error, last_tries, error: str, backoff: float) -> tuple[int, float | None]:
    """(tries, seconds to wait) after a preparation failed with ``error``; no wait (None) when
    the loop ends. The count goes on while the reason stays the same, and starts again at 1
    when it changes."""
    tries = (last_tries if isinstance(last_tries, int) and last_error == error else 0) + 1
    if tries >= PREPARE_TRIES:
        return tries, None
    return tries, max(0.0, float(backoff)) * BACKOFF_GROWTH ** (tries - 1)


class Faults:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def passed_over(self) -> set:
        """Rows this registry's claims pass over: rows that refused even to be set aside."""
        return self.__dict__.setdefault("_passed_over", set())

    def set_aside(self, loop_id: str, why: str, by: str) -> bool:
        """Ends a row a claim cannot take (``STOPPED:bad_row``), saying why in the row and its
        timeline; whether it was. A row that refuses even that is passed over by this worker."""
        reason = f"set aside by worker {by}: {why}"[:1000]
        try:
            with self.backend.tx() as tx:
                if tx.run(SET_ASIDE, (BAD_ROW, reason, loop_id)) != 1:
                    return False
                tx.run(EVENT, (loop_id, 0, "set_aside", json_text({"reason": reason, "worker": by})))
                self.backend.notify(tx, PROGRESS_CHANNEL, loop_id)
            return True
        except Exception as exc:
            if self.backend.row_fault(exc) is None:
                raise
            if len(self.passed_over()) < MAX_PASSED_OVER:
                self.passed_over().add(loop_id)
            return False

    def prepare_failed(self, loop_id: str, generation: int, error: str, backoff: float) -> dict:
        """The worker holding ``generation`` of the loop could not prepare it, for ``error`` (one
        line naming the branch, path or option): the loop waits before its next claim, or ends
        ``STOPPED:prepare_failed`` at the third failure for the same reason. {"tries", "ended",
        "wait"}; LeaseLost when the claim no longer stands."""
        error = error[:500]
        lock = " FOR UPDATE" if self.backend.dialect == "postgres" else ""
        with self.backend.tx() as tx:
            row = tx.one(
                "SELECT prepare_failures, prepare_error FROM fleet_loops "
                f"WHERE id = %s AND generation = %s AND {HELD}{lock}",
                (loop_id, generation),
            )
            if row is None:
                raise lease_lost(loop_id, generation)
            tries, wait = prepare_verdict(row["prepare_error"], row["prepare_failures"], error, backoff)
            said = f"preparing the loop failed {tries} of {PREPARE_TRIES} times: {error}"
            if wait is None:
                sets = "status = 'ended', outcome = %s, reason = %s, worker = NULL, lease_expires = NULL, "
                sets += "not_before = NULL, prepare_failures = %s, prepare_error = %s"
                fenced(tx, loop_id, generation, sets, (PREPARE_FAILED, said, tries, error))
            else:
                sets = "status = 'queued', reason = %s, worker = NULL, lease_expires = NULL, "
                sets += "not_before = {now} + %s, prepare_failures = %s, prepare_error = %s"
                fenced(
                    tx, loop_id, generation, sets, (f"{said}; tried again in {wait:g} s", wait, tries, error)
                )
            data = {"error": error, "tries": tries, "of": PREPARE_TRIES, "wait": wait}
            tx.run(EVENT, (loop_id, generation, "prepare_failed", json_text(data)))
            self.backend.notify(tx, PROGRESS_CHANNEL, loop_id)
        return {"tries": tries, "ended": wait is None, "wait": wait}
