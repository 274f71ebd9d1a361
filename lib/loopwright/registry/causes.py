"""Why a fleet loop failed, kept where the fleet looks: the last error its client or its worker
gave up on goes into the row's ``last_error`` (for `fleet ls`, the page, the API) and, in the
same transaction, into its timeline with the host it happened on. Written by the worker that
holds the loop (fenced like its other writes); the text comes scrubbed and bounded
(core/clienterror.py), and is bounded again here: the column is shown in lists.
"""

from __future__ import annotations

from loopwright.registry import timeline
from loopwright.registry.queue import PROGRESS_CHANNEL, fenced

LIMIT = 1000  # characters of an error kept in the row and its event


class Causes:
    """Mixed into the Registry: ``self.backend`` is its database."""

    def record_error(
        self, loop_id: str, generation: int, error: str, kind: str = "client_error", **data
    ) -> None:
        """The loop's latest error: ``kind`` is ``client_error`` (its Claude Code client gave
        up on an API error, or died) or ``worker_error`` (its worker could not clone, start the
        runner, …); ``data`` adds the host, an exit code. LeaseLost when the claim is gone."""
        error = str(error)[:LIMIT]
        with self.backend.tx() as tx:
            fenced(tx, loop_id, generation, "last_error = %s", (error,))
            timeline.add(tx, loop_id, generation, kind, error=error, **data)
            self.backend.notify(tx, PROGRESS_CHANNEL, loop_id)
