"""The HTTP server the monitor runs in: uvicorn's, which also tells the monitor's event streams
to end as soon as it is asked to exit, so that an open page does not keep it waiting until its
grace runs out (uvicorn then cuts the streams and logs an error)."""

from __future__ import annotations

import uvicorn


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, monitor) -> None:
        super().__init__(config)
        self.monitor = monitor

    def handle_exit(self, sig, frame) -> None:
        # In a signal handler: a flag only (each stream looks at it at least once a second).
        self.monitor.closing = True
        super().handle_exit(sig, frame)
