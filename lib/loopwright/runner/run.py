"""`loopwright run`: a loop driven by a headless Claude Code client, kept going.

The runner starts (or attaches to) a loop under a session id it chooses and runs
``claude -p`` with the loop's first prompt. Inside the client the Stop hook drives the
iterations exactly as in an interactive session. The runner only watches: when the
client goes away while the loop still runs (block cap, crash, API error, a stall it
kills), it resumes the same session with the next prompt, within the bounds of
``core.recovery``. The loop's own time limit becomes the stop file, honoured at the next
Stop. A first Ctrl-C asks the loop to stop the same way; a second one kills the client.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from loopwright.actions import pick
from loopwright.actions import resume as resuming
from loopwright.actions import start as starting
from loopwright.actions.cancel import end_now
from loopwright.actions.pause import pause_clock
from loopwright.core import budget as budgets
from loopwright.core import clienterror, recovery
from loopwright.core.clock import now_iso
from loopwright.core.errors import UserError
from loopwright.runner import causes, notify, orphan
from loopwright.runner.client import Client
from loopwright.state import loops, store


class Options:
    def __init__(
        self,
        claude: str = "claude",
        claude_args: tuple = (),
        plugin_dir: str | None = None,
        poll_seconds: float = 60.0,
        stall_polls: int = 3,
        per_iteration: int = recovery.PER_ITERATION,
        in_all: int = recovery.IN_ALL,
        quota_base: float = recovery.QUOTA_BASE,
        quota_waits: int = recovery.QUOTA_WAITS,
        notify: tuple = (),
    ):
        self.claude, self.claude_args, self.plugin_dir = claude, tuple(claude_args), plugin_dir
        self.poll_seconds, self.stall_polls = poll_seconds, stall_polls
        self.per_iteration, self.in_all = per_iteration, in_all
        self.quota_base, self.quota_waits = quota_base, quota_waits
        self.notify = tuple(notify)


class Interrupts:
    """Ctrl-C once: the loop is asked to stop; twice: the client is killed."""

    def __init__(self) -> None:
        self.count = 0

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.count += 1


def client_argv(
    opts: Options, prompt: str, session: str, resume: bool, dollars_left: float | None
) -> list[str]:
    argv = [opts.claude, "-p", prompt, "--output-format", "stream-json", "--verbose"]
    argv += ["--resume", session] if resume else ["--session-id", session]
    if opts.plugin_dir:
        argv += ["--plugin-dir", opts.plugin_dir]
    if dollars_left is not None:  # the client's own ceiling: a backstop should a Stop go missing
        argv += ["--max-budget-usd", f"{max(dollars_left, 0.01):.2f}"]
    return argv + list(opts.claude_args)


def dollars_left(loop: dict, budget: dict) -> float | None:
    """What the loop may still spend, when it has a dollar ceiling (0 means none)."""
    ceiling = budget.get("max_dollars", loop.get("max_dollars"))
    if not isinstance(ceiling, (int, float)) or ceiling <= 0:
        return None
    return float(ceiling) - float(budget.get("dollars_estimate") or 0.0)


def is_session_id(text: str) -> bool:
    """A UUID: what `claude --session-id` accepts."""
    try:
        return str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False


def plugin_enabled_in_claude() -> bool:
    """Whether the user's Claude Code settings already enable a loopwright plugin (then
    loading this checkout too would run every hook twice)."""
    path = Path(os.path.expanduser("~/.claude/settings.json"))
    try:
        from loopwright.core import jsoncodec

        settings = jsoncodec.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    enabled = settings.get("enabledPlugins") if isinstance(settings, dict) else None
    return isinstance(enabled, dict) and any(
        k.split("@")[0] == "loopwright" and v for k, v in enabled.items()
    )


class Run:
    """One `loopwright run`: the loop, the client in use, and what happened so far."""

    def __init__(self, state: Path, opts: Options, report, session: str | None = None):
        self.state, self.opts, self.report = state, opts, report
        self.session = session or str(uuid.uuid4())
        self.counts = recovery.Counts()
        self.interrupts = Interrupts()
        self.paths: loops.LoopPaths | None = None
        self._busy_seen: int | None = None  # busy.json's mtime at the last poll
        self.stop_written = False
        self.last_result: dict | None = None  # the client's last "result" event
        self.error_kind: str | None = None  # the kind of API error the client's stream last showed
        self.last_error: str | None = None  # the latest client error, worded (core/clienterror.py)
        self.quota_waits = 0  # in a row
        self.notifiers = notify.Notifiers(list(opts.notify), report)

    def _notify(self, event: str, **fields) -> None:
        self.notifiers.send(
            {
                "event": event,
                "loop": self.paths.name,
                "project": str(self.state.parent),
                "at": now_iso(),
                **fields,
            }
        )

    def start(self, req: starting.StartRequest) -> str:
        req.session = self.session
        self.paths, loop = starting.start(self.state, req)
        self.report("started", loop=loop["name"], session=self.session, mode=loop["mode"])
        return starting.announcement(loop)

    def command(self, text: str) -> str:
        """Start the loop a ``/loopwright:<command> ...`` line starts (any mode's command), as the
        UserPromptSubmit hook would for this run's session; the text the agent reads first."""
        from loopwright.core import jsoncodec
        from loopwright.events import slash

        event = {"prompt": text, "session_id": self.session, "cwd": str(self.state.parent)}
        answer = slash.handle(jsoncodec.dumps(event))
        if answer is None:
            raise UserError(f"{text.split()[0]} is not a loopwright command that starts a loop")
        if answer.get("decision") == "block":
            raise UserError(answer["reason"].removeprefix("loopwright: error: "))
        name = starting.owned_active_loop(self.state, self.session)
        if name is None:
            raise UserError(f"{text.split()[0]} started no loop; `loopwright run` needs one to drive")
        self.paths = loops.LoopPaths(self.state, name)
        self.report("started", loop=name, session=self.session, command=text.split()[0])
        return answer["hookSpecificOutput"]["additionalContext"]

    def attach(self, name: str) -> str:
        res = resuming.resume(self.state, name, self.session)
        self.paths = res.paths
        self.report("attached", loop=res.paths.name, session=self.session, notes=res.notes)
        return starting.resumed_note(res)

    def go(self, prompt: str) -> int:
        """Drive the loop to its end (or to a point only the user can pass); the exit code."""
        os.environ["LOOPWRIGHT_OWNER_PID"] = str(os.getpid())  # the loop's lock names this runner
        self.interrupts.install()
        resume = False
        while True:
            self.last_result, self.error_kind = None, None
            why = self._one_client(prompt, resume)
            if why is None:
                return recovery.EXIT_INTERRUPTED
            loop, budget = self._loop_state()
            waiting = [g["name"] for g in budget.get("pending_gates") or [] if not g.get("answer")]
            iteration = int(budget.get("iterations_used", 0)) + 1
            active = loop.get("status") == loops.ACTIVE and self.interrupts.count == 0
            if active and not waiting and recovery.hit_usage_limit(self.last_result):
                if not self._wait_out_usage_limit():
                    return self._finish(recovery.END, "", pick.config(self.paths))
            else:
                self.quota_waits = 0
                action, reason = recovery.after_client(
                    active, waiting, iteration, self.counts, why, self.opts.per_iteration, self.opts.in_all
                )
                if action != recovery.RESUME:
                    return self._finish(action, reason, loop)
                self.counts.add(iteration)
                self.report("resume", reason=reason, iteration=iteration, recoveries=self.counts.total)
                if why.startswith("no progress"):
                    self._notify("stall_recovered", reason=reason, iteration=iteration)
            prompt, resume = self.attach_again(), True

    def _wait_out_usage_limit(self) -> bool:
        """Wait until the usage limit resets, the loop's clock paused meanwhile; False when
        the run gives up (too many waits in a row) or is interrupted, the loop then ended."""
        if self.quota_waits >= self.opts.quota_waits:
            reason = f"the usage limit held through {self.quota_waits} waits in a row"
            end_now(self.state, self.paths.name, recovery.QUOTA_LIMIT, reason, self.session)
            return False
        text = str((self.last_result or {}).get("result") or "")
        seconds = recovery.quota_wait(text, self.quota_waits, time.time(), self.opts.quota_base)
        self.quota_waits += 1
        until = now_iso(time.time() + seconds)
        self.report("quota_wait", seconds=round(seconds, 1), until=until, message=text)
        self._notify("quota_wait", reason=text, until=until)
        began = time.monotonic()
        while time.monotonic() - began < seconds and not self.interrupts.count:
            time.sleep(min(0.5, seconds))
        waited = time.monotonic() - began
        pause_clock(self.state, self.paths.name, waited, "usage limit", self.session)
        if self.interrupts.count:
            end_now(self.state, self.paths.name, "STOPPED:user_stop", "interrupted during a wait")
            return False
        return True

    def attach_again(self) -> str:
        return starting.resumed_note(resuming.resume(self.state, self.paths.name, self.session))

    def _finish(self, action: str, reason: str, loop: dict) -> int:
        if action == recovery.GIVE_UP:
            end_now(self.state, self.paths.name, recovery.STALL_LIMIT, reason, self.session)
            loop = pick.config(self.paths)
        if action == recovery.WAIT_FOR_USER:
            self.report("waiting", loop=self.paths.name, reason=reason)
            self._notify("gate_waiting", reason=reason)
            return recovery.exit_code(None, waiting=True)
        if loop.get("status") == loops.ACTIVE:  # stopped by the user before the loop could end itself
            end_now(self.state, self.paths.name, "STOPPED:user_stop", "the run was interrupted")
            loop = pick.config(self.paths)
        outcome = loop.get("outcome")
        self.report("ended", loop=self.paths.name, outcome=outcome, reason=loop.get("end_reason"))
        error = {"last_error": self.last_error} if self.last_error else {}
        self._notify("loop_ended", outcome=outcome, reason=loop.get("end_reason"), **error)
        return recovery.exit_code(outcome)

    def _loop_state(self) -> tuple[dict, dict]:
        loop = pick.config(self.paths)
        budget = loops.read_state(self.paths.configured(loop), "budget", move_corrupt=False) or {}
        return loop, budget

    def _one_client(self, prompt: str, resume: bool) -> str | None:
        """Run one client until it exits or stalls; why it is gone (None: killed on request)."""
        loop, budget = self._loop_state()
        argv = client_argv(self.opts, prompt, self.session, resume, dollars_left(loop, budget))
        client = Client(argv, dict(os.environ), str(self.state.parent))
        self.report("client", pid=client.proc.pid, resumed=resume, argv=argv[3:])
        quiet = 0
        try:
            while not client.wait(self.opts.poll_seconds):
                orphan.check()
                self._relay(client)
                if self.interrupts.count >= 2:
                    client.stop()
                    self.report("killed", reason="interrupted twice")
                    return None
                self._ask_stop_when_due()
                quiet = 0 if client.activity() or self._busy_moved() else quiet + 1
                if recovery.stalled(quiet, self.opts.stall_polls):
                    client.stop()
                    self.report("stall", polls=quiet, seconds=self.opts.poll_seconds)
                    return f"no progress for {quiet} polls of {self.opts.poll_seconds:g} s"
        except orphan.Orphaned:
            client.stop(grace=2.0)  # its worker is gone: nobody would push or record what it does
            raise
        self._relay(client)
        error = self._client_error(client)
        tail = clienterror.from_stderr(client.stderr_tail.decode("utf-8", "replace")) or ""
        self.report("client_exit", code=client.returncode, error=error, stderr=tail)
        if error:
            self.last_error = error
            causes.record(self.paths, error, client.returncode, self.session)
        return clienterror.exit_cause(client.returncode, error)

    def _client_error(self, client: Client) -> str | None:
        """What the client gave up on: the API error its last turn reported, else (when it
        exited with an error and no result said why) its last stderr lines."""
        error = clienterror.from_result(self.last_result, self.error_kind)
        if error is None and client.returncode:
            error = clienterror.from_stderr(client.stderr_tail.decode("utf-8", "replace"))
        return error

    def _busy_moved(self) -> bool:
        """A loopwright command of the loop's (a bounded wait) said it is alive since the last poll."""
        try:
            stamp = os.stat(self.paths.busy).st_mtime_ns
        except (OSError, AttributeError):
            return False
        moved, self._busy_seen = stamp != self._busy_seen, stamp
        return moved

    def _relay(self, client: Client) -> None:
        for event in client.events():
            if event.get("type") == "assistant":  # the turn's last message says what it failed on
                self.error_kind = clienterror.api_error_kind(event)
            if event.get("type") == "result":
                self.last_result = event
                self.report("turn_end", turns=event.get("num_turns"), cost=event.get("total_cost_usd"))
        self.report("progress", **self._progress())

    def _progress(self) -> dict:
        try:
            p = loops.read_state(self.paths, "progress", move_corrupt=False) or {}
        except (store.CorruptFile, OSError):
            p = {}
        keep = ("iteration", "max_iterations", "minutes_elapsed", "max_minutes", "dollars_estimate")
        return {k: p.get(k) for k in (*keep, "max_dollars", "last_reason")}

    def _ask_stop_when_due(self) -> None:
        """The first Ctrl-C, or the loop's time limit: the stop file, read at the next Stop."""
        if self.stop_written:
            return
        reason = "user_stop" if self.interrupts.count else self._timed_out()
        if reason:
            store.write_json(self.paths.stop, {"reason": reason, "timestamp": now_iso()})
            self.stop_written = True
            self.report("stop_requested", reason=reason)

    def _timed_out(self) -> str | None:
        loop, budget = self._loop_state()
        limit = budget.get("max_minutes", loop.get("max_minutes"))
        if not budget.get("started_at") or not isinstance(limit, (int, float)):
            return None
        return "timeout" if budgets.minutes_elapsed(budget, time.time()) > limit else None
