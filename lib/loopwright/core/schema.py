"""Shapes of the state files, checked on every read.

A state file that parses but holds the wrong types or values (a string where a
count belongs, a negative budget, a list for an object) is as unusable as one
that does not parse: the reader reports it the same way. Standard library only,
because the Stop hook's fast path and the status line use it; jsonschema would
cost more to import than a whole Stop is allowed to take.

A spec is built from the small classes below; ``check(spec, value, where)``
raises SchemaError naming the first offending key path.
"""

from __future__ import annotations

BIG = 10**15  # ceiling for counters: far beyond any real loop, small enough to stay exact


class SchemaError(ValueError):
    """A value does not have the expected shape; the message names where."""


class Spec:
    null = False

    def check(self, value: object, where: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def _fail(self, where: str, want: str, value: object) -> None:
        shown = repr(value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        raise SchemaError(f"{where}: expected {want}, got {shown}")


class Int(Spec):
    def __init__(self, lo: int = 0, hi: int = BIG, null: bool = False):
        self.lo, self.hi, self.null = lo, hi, null

    def check(self, value, where):
        if value is None and self.null:
            return
        if type(value) is not int or not self.lo <= value <= self.hi:
            self._fail(where, f"an integer from {self.lo} to {self.hi}", value)


class Num(Spec):
    """An int or a finite float in [lo, hi]."""

    def __init__(self, lo: float = 0.0, hi: float = float(BIG), null: bool = False):
        self.lo, self.hi, self.null = lo, hi, null

    def check(self, value, where):
        if value is None and self.null:
            return
        if type(value) not in (int, float) or not self.lo <= value <= self.hi:  # NaN fails the range test
            self._fail(where, f"a number from {self.lo:g} to {self.hi:g}", value)


class Str(Spec):
    def __init__(
        self, maxlen: int = 1_000_000, null: bool = False, choices: tuple = (), nonempty: bool = False
    ):
        self.maxlen, self.null, self.choices, self.nonempty = maxlen, null, choices, nonempty

    def check(self, value, where):
        if value is None and self.null:
            return
        if type(value) is not str or len(value) > self.maxlen or (self.nonempty and not value):
            self._fail(where, f"a string of at most {self.maxlen} characters", value)
        if self.choices and value not in self.choices:
            self._fail(where, "one of " + ", ".join(map(str, self.choices)), value)


class Bool(Spec):
    def __init__(self, null: bool = False):
        self.null = null

    def check(self, value, where):
        if not (type(value) is bool or (value is None and self.null)):
            self._fail(where, "true or false", value)


class List(Spec):
    def __init__(self, item: Spec, maxlen: int = 100_000, null: bool = False):
        self.item, self.maxlen, self.null = item, maxlen, null

    def check(self, value, where):
        if value is None and self.null:
            return
        if type(value) is not list or len(value) > self.maxlen:
            self._fail(where, f"a list of at most {self.maxlen} items", value)
        for i, v in enumerate(value):
            self.item.check(v, f"{where}[{i}]")


class Map(Spec):
    """An object used as a dictionary: string keys, values of one spec."""

    def __init__(self, value: Spec, maxlen: int = 100_000, null: bool = False):
        self.value, self.maxlen, self.null = value, maxlen, null

    def check(self, value, where):
        if value is None and self.null:
            return
        if type(value) is not dict or len(value) > self.maxlen:
            self._fail(where, "an object", value)
        for k, v in value.items():
            self.value.check(v, f"{where}.{k}")


class Obj(Spec):
    """An object with known keys; unknown keys are allowed (newer versions may add some)."""

    def __init__(self, fields: dict, required: tuple = (), null: bool = False):
        self.fields, self.required, self.null = fields, required, null

    def check(self, value, where):
        if value is None and self.null:
            return
        if type(value) is not dict:
            self._fail(where, "an object", value)
        for key in self.required:
            if key not in value:
                raise SchemaError(f"{where}: the key {key!r} is missing")
        for key, spec in self.fields.items():
            if key in value:
                spec.check(value[key], f"{where}.{key}" if where else key)


class Anything(Spec):
    def check(self, value, where):
        return


def check(spec: Spec, value: object, where: str = "") -> None:
    spec.check(value, where)


def valid(spec: Spec, value: object) -> bool:
    try:
        spec.check(value, "")
    except SchemaError:
        return False
    return True


# --- the state files ---------------------------------------------------------------------------

TIME = Str(64, null=True)
NAME = Str(64, nonempty=True)
TEXT = Str(200_000, null=True)
COUNT = Int()
MONEY = Num(0.0, 1e9)

_RATE_FIELDS = ("input", "output", "cache_write", "cache_read")

LOOP = Obj(
    {
        "version": Int(1, 1000),
        "id": Str(64, nonempty=True),
        "name": NAME,
        "mode": Str(32, nonempty=True),
        "prompt": Str(200_000),
        "completion_promise": Str(1000, nonempty=True),
        "max_iterations": Int(1, 1_000_000),
        "max_minutes": Num(1e-9, 1e7),
        "max_tokens": Int(1, BIG, null=True),
        "max_dollars": Num(0.0, 1e9, null=True),
        "max_prs": Int(1, 1_000_000, null=True),
        "lock_mode": Str(8, choices=("skip", "wait", "force")),
        "gate_policy": Str(8, choices=("ask", "continue", "stop")),
        "budget_file": Str(4096, null=True),
        # Where the loop's tasks come from, decided at start (state/tasks.py start_source):
        # env, loop, project, or file:<relpath> for a file loopwright did not write (data).
        "tasks_source": Str(4200, nonempty=True),
        "verify": Str(100_000, null=True),
        "verify_timeout": Num(1e-9, 1e5, null=True),
        "wrap_up": Bool(),
        "wrap_up_floor": Num(0.0, 0.5, null=True),
        # The completion judge (core/judge.py): only the user's start options set these.
        "judge": Bool(null=True),
        "judge_model": Str(128, null=True),
        "judge_timeout": Num(1.0, 600.0, null=True),
        "owner_session": Str(256, null=True),
        "nonce": Str(128, nonempty=True),
        "status": Str(16, choices=("active", "ended")),
        "outcome": Str(256, null=True),
        "created_at": TIME,
        "started_at": Str(64, nonempty=True),
        "ended_at": TIME,
        "end_reason": TEXT,
        "project_dir": Str(4096, nonempty=True),
        "sig": Str(128, null=True),
        "adopted_at": TIME,
        # A random id given at start and at adoption, and a counter every save raises: with
        # the record of ended loops beside the key (state/trust.py) they tell an older copy
        # of a loop that has ended since from the loop itself. Absent in older loops.
        "loop_id": Str(64, nonempty=True),
        "generation": Int(0, BIG),
        # Project rates below the built-in ones the user confirmed at start (core/rates.py;
        # the fields and the ceiling are rates.FIELDS and rates.MAX_RATE, held equal by a test).
        "accepted_rates": Map(
            Obj({f: Num(0.0, 1000.0) for f in _RATE_FIELDS}, required=_RATE_FIELDS), maxlen=200, null=True
        ),
    },
    required=(
        "id",
        "name",
        "mode",
        "prompt",
        "completion_promise",
        "max_iterations",
        "max_minutes",
        "status",
        "started_at",
        "project_dir",
        "nonce",
    ),
)

LOCK = Obj(
    {
        "owner": Str(300, nonempty=True),
        "pid": Int(1, 2**31, null=True),
        "pid_create_time": Num(0.0, 1e11, null=True),
        "host": Str(256, null=True),
        "acquired_at": TIME,
        "heartbeat_at": TIME,
        "iteration": Int(0, 10**7, null=True),
    },
    required=("owner",),
)

GATE = Obj(
    {
        "name": Str(64, nonempty=True),
        "question": Str(10_000),
        "options": List(Str(64), 20),
        "answer": Str(64, null=True),
        "asks": Int(0, 10**6),
        "iteration": Int(0, 10**7, null=True),
        "by": Str(64, null=True),
        "at": TIME,
        "asked_at": TIME,
        "answered_at": TIME,
        "answered_by": Str(64, null=True),
        "dimensions": List(Str(16), 10),
        "raise_to": Map(Num(0.0, float(BIG), null=True), 10),
        "requested_by": Str(256, null=True),
    },
    required=("name", "question"),
)

USAGE = Map(Int(), 16)

# The completion judge's record in budget.json (core/judge.py record and fold).
JUDGE_LAST = Obj(
    {
        "iteration": Int(0, 10**7),
        "at": TIME,
        "verdict": Str(16, choices=("done", "not_done", "not_judged")),
        "reason": Str(10_000, null=True),
        "failure": Str(32, null=True),
        "detail": Str(10_000, null=True),
        "model": Str(256, null=True),
        "seconds": Num(0.0, 1e5, null=True),
        "dollars": Num(0.0, 1e9, null=True),
    }
)
JUDGE_RECORD = Obj(
    {
        "calls": Int(0, 10**7),
        "done": Int(0, 10**7),
        "not_done": Int(0, 10**7),
        "not_judged": Int(0, 10**7),
        "noes_in_row": Int(0, 10**7),
        "failures_in_row": Int(0, 10**7),
        "dollars": Num(0.0, 1e9),
        "tokens_by_model": Map(USAGE, 100),
        "last": JUDGE_LAST,
    }
)

CURSOR = Obj(
    {
        "path": Str(4096, null=True),
        "offset": Int(0, 2**62, null=True),
        "last_id": Str(512, null=True),
        "last_usage": USAGE,
        "last_ts": TIME,
    },
)

ROUTER = Obj(
    {
        "last_action": Str(16, null=True),
        "last_reason": TEXT,
        "last_tick_at": TIME,
        "toolless_blocks": Int(0, 10**7),
        "pauses": List(Obj({"after_iteration": Int(0, 10**7), "why": Str(32)}), 100_000),
        "iteration_started_at": TIME,
        "paused_at": TIME,
        "pause_why": Str(32, null=True),
        "wrap_up": Obj(
            {
                "open": Bool(),
                "outcome": Str(256, nonempty=True),
                "reason": TEXT,
                "fired": List(Str(64), 100),
                "after_iteration": Int(0, 10**7),
                "dollars_before": MONEY,
                "tokens_before": COUNT,
            },
            required=("open", "outcome", "fired", "dollars_before", "tokens_before"),
        ),
    },
)

PR_RECORD = Obj(
    {
        "number": Int(0, 10**9),
        "branch": Str(1024),
        "head_sha_at_iteration_start": Str(64),
        "head_sha_at_iteration_end": Str(64),
        "state_at_end": Str(16),
    }
)
WORKTREE = Obj({"path": Str(4096), "branch": Str(1024), "head_sha": Str(64)})

BUDGET = Obj(
    {
        "started_at": Str(64, nonempty=True),
        "max_iterations": Int(1, 1_000_000),
        "max_prs": Int(1, 1_000_000, null=True),
        "max_minutes": Num(1e-9, 1e7),
        "max_dollars": Num(0.0, 1e9, null=True),
        "max_tokens": Int(1, BIG, null=True),
        "wrap_up": Bool(),
        "wrap_up_floor": Num(0.0, 0.5, null=True),
        "iterations_used": Int(0, 10**7),
        "prs_touched": List(Str(64)),
        "comments_pushed": COUNT,
        "merges_attempted": COUNT,
        "minutes_elapsed": Num(0.0, 1e9),
        "clock_paused_seconds": Num(0.0, 1e12),  # waits for a usage limit: not counted as time
        "tokens_in": COUNT,
        "tokens_out": COUNT,
        "cache_creation_input_tokens": COUNT,
        "cache_read_input_tokens": COUNT,
        "agents_dispatched": COUNT,
        "dollars_estimate": MONEY,
        "rate_table_source": Str(4096, null=True),
        "unknown_models": List(Str(256), 1000),
        "qmd_failures_consecutive": Int(0, 10**7),
        "tokens_by_model": Map(USAGE, 1000),
        "last_failure": Obj({"item": Str(10_000), "root_cause": Str(100_000)}, null=True),
        "pending_gates": List(GATE, 100),
        "gates_this_iter": List(GATE, 1000),
        "gates_log": List(GATE),
        "tracked_prs": List(PR_RECORD, 10_000),
        "active_worktrees": List(WORKTREE, 10_000),
        "cursor": CURSOR,
        "reports_offset": Int(0, 2**62),
        "router": ROUTER,
        "judge": JUDGE_RECORD,
        "mode_state": Anything(),  # checked by the loop's mode (modes.check_state)
        "tick": Anything(),  # the commit record; checked by its own spec where it is used
    },
    required=("started_at", "max_iterations", "max_minutes", "iterations_used"),
)

PROGRESS = Obj(
    {
        "name": NAME,
        "mode": Str(32),
        "iteration": Int(0, 10**7),
        "max_iterations": Int(1, 1_000_000),
        "minutes_elapsed": Num(0.0, 1e9),
        "max_minutes": Num(0.0, 1e7),
        "dollars_estimate": MONEY,
        "max_dollars": Num(0.0, 1e9, null=True),
        "paused": Bool(),
        "pending_gates": List(Str(64), 100),
        "owner_session": Str(256, null=True),
        "last_reason": TEXT,
        # What the headless client last gave up on (runner/causes.py), until a tick rewrites the file.
        "last_error": Str(1000, null=True),
        "last_error_at": TIME,
    },
)

LEDGER_SLOT = Map(Num(0.0, float(BIG)), 16)
LEDGER = Obj(
    {
        "current_task": Str(1024, null=True),
        "sessions": Map(LEDGER_SLOT),
        "tasks": Map(LEDGER_SLOT),
        "iteration": Int(0, 10**7),
    },
)

STOP_REQUEST = Obj({"reason": Str(256, null=True), "timestamp": Anything()})

BACKPROP = Obj(
    {
        "source": Str(32, null=True),
        "command": Str(100_000, null=True),
        "exit_code": Int(-1000, 1000, null=True),
        "timed_out": Bool(null=True),
        "seconds": Num(0.0, 1e7, null=True),
        "output_tail": Str(100_000, null=True),
        "at": TIME,
        "iteration": Int(0, 10**7, null=True),
    },
)

REPORT = Obj(
    {
        "outcome": Str(16, choices=("success", "failure", "partial", "skipped")),
        "iteration": Int(0, 10**7),
        "session": Str(256, null=True),
        "prs": List(Str(32), 1000),
        "comments": Int(0, 10**7),
        "merges": Int(0, 10**7),
        "agents": Int(0, 10**7),
        "root_cause": Str(100_000),
        "item": Str(10_000),
        "external_error": Str(10_000),
        "exit_code": Int(-1000, 1000),
        "tracked_prs": List(PR_RECORD, 1000),
        "worktrees": List(WORKTREE, 1000),
        "task": Str(1024),
        "note": Str(100_000),
    },
    required=("outcome",),
)

SNAPSHOT_COUNTERS = {
    k: BUDGET.fields[k]
    for k in (
        "iterations_used",
        "prs_touched",
        "minutes_elapsed",
        "tokens_in",
        "tokens_out",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "agents_dispatched",
        "dollars_estimate",
        "comments_pushed",
        "merges_attempted",
        "qmd_failures_consecutive",
    )
}

HISTORY = Obj(
    {
        "iteration": Int(0, 10**7),  # 0: a wait or gate turn before the first counted iteration
        "outcome": Str(256),
        "budget_snapshot": Obj(SNAPSHOT_COUNTERS),
        "tracked_prs": List(PR_RECORD, 10_000),
        "active_worktrees": List(WORKTREE, 10_000),
        "tokens_in_this_iter": COUNT,
        "tokens_out_this_iter": COUNT,
        "dollars_this_iter": Num(-1e9, 1e9),
        "gates": List(GATE, 1000),
        "stop_conditions_fired": List(Str(64), 100),
    },
    required=("iteration", "outcome"),
)

PROJECT_CONFIG = Obj(
    {
        "tasks_file": Str(4096, null=True),
        "tasks": Obj({"prompt_budget_chars": Int(1, 10**6)}, null=True),
        "run": Obj({"notify": List(Str(4096), 20)}, null=True),
    },
)

# A judge run kept for the deferred final tick of the same Stop (state/judging.py), so the
# judge is asked once per claim even when the tick is redone.
JUDGE_RESULT = Obj(
    {
        "verdict": Str(16, choices=("done", "not_done", "not_judged")),
        "reason": Str(10_000, null=True),
        "failure": Str(32, null=True),
        "detail": Str(10_000, null=True),
        "usage": Map(USAGE, 10),
        "model": Str(256, null=True),
        "seconds": Num(0.0, 1e5, null=True),
        "reported_cost_usd": Num(0.0, 1e9, null=True),
        "session_id": Str(256, null=True),
    },
    required=("verdict", "usage"),
)
JUDGE_CACHE = Obj({"key": Str(128, nonempty=True), "result": JUDGE_RESULT}, required=("key", "result"))
