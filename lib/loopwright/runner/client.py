"""One headless Claude Code client: `claude -p` in its own process group, its
stream-json output read line by line on a thread, its progress observable."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time

STDERR_TAIL = 4000


def find_program(program: str) -> str | None:
    """``program`` as an absolute path: a path (absolute, or relative to here) to an executable
    file, or a name found on $PATH; None when there is none. `run` and `worker` check their
    --claude with it before anything starts."""
    import shutil

    found = shutil.which(program) if program else None
    return os.path.abspath(found) if found else None


def missing_program(program: str) -> str:
    """The one line a missing --claude is refused with."""
    return (
        f"Claude Code's CLI ({program}) was not found or is not an executable file; "
        "install it or pass --claude PATH"
    )


class Client:
    """A running ``claude -p``. ``activity()`` says whether it showed any sign of progress
    since the last call: a new output line, or CPU time spent by it or its tools."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str):
        self.argv = argv
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own group: a terminal's Ctrl-C reaches only the runner
        )
        self.lines: queue.Queue = queue.Queue()
        self.stderr_tail = b""
        self._seen = 0
        self._count = 0
        self._cpu = 0.0
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        for raw in self.proc.stdout:
            self._count += 1
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict):
                self.lines.put(event)

    def _read_stderr(self) -> None:
        for raw in self.proc.stderr:
            self.stderr_tail = (self.stderr_tail + raw)[-STDERR_TAIL:]

    def events(self) -> list[dict]:
        out = []
        while True:
            try:
                out.append(self.lines.get_nowait())
            except queue.Empty:
                return out

    def activity(self) -> bool:
        """New output, or CPU spent by the client or its children, since the last call."""
        count, cpu = self._count, self._cpu_time()
        moved = count != self._seen or cpu > self._cpu + 0.05
        self._seen, self._cpu = count, max(cpu, self._cpu)
        return moved

    def _cpu_time(self) -> float:
        try:
            import psutil

            proc = psutil.Process(self.proc.pid)
            total = sum(proc.cpu_times()[:2])
            for child in proc.children(recursive=True):
                try:
                    total += sum(child.cpu_times()[:2])
                except psutil.Error:
                    pass
            return total
        except Exception:  # gone, or no psutil: output alone tells progress
            return self._cpu

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> bool:
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self, grace: float = 5.0) -> None:
        """End the client and everything it started: SIGTERM, then SIGKILL after ``grace``, to
        its process group; then SIGKILL to whatever of its descendants is left (a tool's
        command may run in a session of its own, out of the client's group)."""
        below = self._descendants()
        self._signal_group(grace)
        mine = os.getpgrp()
        for child in below:
            try:
                if not child.is_running():  # gone (is_running also tells a reused pid)
                    continue
                group = os.getpgid(child.pid)
                if group != mine:  # never this runner's own group
                    os.killpg(group, signal.SIGKILL)
                child.kill()
            except Exception:  # gone meanwhile, or not ours to signal
                pass
        self.wait(10.0)

    def _descendants(self) -> list:
        try:
            import psutil

            return psutil.Process(self.proc.pid).children(recursive=True)
        except Exception:  # gone, or no psutil: the group signal alone
            return []

    def _signal_group(self, grace: float) -> None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and self.alive():
                self.wait(0.1)
            if not self.alive():
                break

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode
