"""The registry's schema, as numbered steps. A step is applied once, in order, and recorded in
``schema_version``; a released step is never edited, only followed by a new one.

Types are written for both databases: ``{real}`` is a double on either, text holds JSON.
"""

from __future__ import annotations

RUNS = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    project TEXT NOT NULL,
    loop TEXT,
    task_dir TEXT,
    status TEXT NOT NULL,
    pid INTEGER,
    pid_started {real},
    max_iterations INTEGER,
    max_minutes {real},
    iteration INTEGER NOT NULL DEFAULT 0,
    last_signal_at TEXT,
    stall_count INTEGER NOT NULL DEFAULT 0,
    last_capture_hash TEXT,
    quota_wait_started TEXT,
    outcome TEXT,
    reason TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS notified (key TEXT PRIMARY KEY, at TEXT NOT NULL)
"""


def _runs_pid_started(tx, dialect: str) -> None:
    """A SQLite registry made before runners' create times were kept lacks the column."""
    if dialect == "sqlite":
        have = {r["name"] for r in tx.rows("PRAGMA table_info(runs)")}
        if "pid_started" not in have:
            tx.run("ALTER TABLE runs ADD COLUMN pid_started REAL")


# The fleet (issue 20): the queue of loops, each loop's timeline, the workers. ``seq`` orders
# the queue where two submits share a created_at (SQLite's clock counts milliseconds).
FLEET = """
CREATE TABLE IF NOT EXISTS fleet_loops (
    seq {serial},
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    spec TEXT NOT NULL,
    repo TEXT NOT NULL,
    branch TEXT,
    work_branch TEXT NOT NULL,
    account TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL,
    outcome TEXT,
    reason TEXT,
    worker TEXT,
    host TEXT,
    generation INTEGER NOT NULL DEFAULT 0,
    lease_expires {real},
    failovers INTEGER NOT NULL DEFAULT 0,
    iteration INTEGER NOT NULL DEFAULT 0,
    minutes {real} NOT NULL DEFAULT 0,
    tokens BIGINT NOT NULL DEFAULT 0,
    dollars {real} NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT '{}',
    last_decision TEXT,
    control TEXT,
    gate TEXT,
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    claimed_at {real}
);
CREATE UNIQUE INDEX IF NOT EXISTS fleet_loops_name ON fleet_loops (name);
CREATE INDEX IF NOT EXISTS fleet_loops_claim ON fleet_loops (status, created_at, seq);
CREATE INDEX IF NOT EXISTS fleet_loops_lease ON fleet_loops (status, lease_expires, seq);
CREATE TABLE IF NOT EXISTS fleet_events (
    id {serial},
    loop_id TEXT NOT NULL,
    at {real} NOT NULL,
    generation INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS fleet_events_loop ON fleet_events (loop_id, id);
CREATE TABLE IF NOT EXISTS fleet_workers (
    worker TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    slots INTEGER NOT NULL,
    used INTEGER NOT NULL,
    account TEXT,
    loops TEXT NOT NULL DEFAULT '[]',
    beat_at {real} NOT NULL,
    started_at {real} NOT NULL
)
"""
# Ids that only grow (an event's id is a reader's "after" cursor): written per dialect.
SERIAL = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgres": "BIGSERIAL PRIMARY KEY"}

# One budget and one account's limits for the fleet (issue 20 part 5). A scope is 'fleet',
# 'account:<name>' or 'tag:<name>'; a NULL cap is no cap. Spend is kept per UTC day of the
# database's clock, so a day's cap resets at midnight UTC on every machine at once.
LIMITS = """
CREATE TABLE IF NOT EXISTS fleet_limits (
    scope TEXT PRIMARY KEY,
    max_dollars_per_day {real},
    max_running INTEGER,
    updated_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS fleet_spend (
    day TEXT NOT NULL,
    scope TEXT NOT NULL,
    dollars {real} NOT NULL DEFAULT 0,
    PRIMARY KEY (day, scope)
);
CREATE TABLE IF NOT EXISTS account_pauses (
    account TEXT PRIMARY KEY,
    until {real} NOT NULL,
    reason TEXT,
    set_by TEXT,
    at {real} NOT NULL
)
"""

# Which loop works which item of a backlog that several loops share (`submit --parallel`, issue
# 20 part 7): the primary key makes a claim unique across the fleet. 'reserved' is an item held
# for the loop (it goes back when the loop ends), 'done' one the loop took (kept for good).
ITEMS = """
CREATE TABLE IF NOT EXISTS fleet_items (
    backlog TEXT NOT NULL,
    item TEXT NOT NULL,
    loop_id TEXT NOT NULL,
    state TEXT NOT NULL,
    at {real} NOT NULL,
    PRIMARY KEY (backlog, item)
);
CREATE INDEX IF NOT EXISTS fleet_items_loop ON fleet_items (loop_id)
"""

# What each worker accepts (issue 26): its --allow-repo and --allow-verify patterns (JSON lists)
# and its lease, written at every heartbeat, so that `submit` can refuse a loop no live worker
# would take. NULL is a worker that does not say (taken to accept anything: it is advice).
WORKER_POLICY = """
ALTER TABLE fleet_workers ADD COLUMN allow_repo TEXT;
ALTER TABLE fleet_workers ADD COLUMN allow_verify TEXT;
ALTER TABLE fleet_workers ADD COLUMN lease {real}
"""

# A row must never stop or jam the fleet (issue 26). The counters a claim adds to become 64-bit
# on PostgreSQL (SQLite's integers are already); a loop that cannot be prepared waits until
# ``not_before`` (database clock) and counts its failures for the same reason; a worker holds its
# name with a token of its process, live while it beats within ``live_for`` seconds.
CLAIMS = {
    "postgres": """
ALTER TABLE fleet_loops ALTER COLUMN generation TYPE BIGINT, ALTER COLUMN failovers TYPE BIGINT,
    ALTER COLUMN iteration TYPE BIGINT;
ALTER TABLE fleet_events ALTER COLUMN generation TYPE BIGINT
""",
    "sqlite": "",
}
CLAIM_COLUMNS = """
ALTER TABLE fleet_loops ADD COLUMN not_before {real};
ALTER TABLE fleet_loops ADD COLUMN prepare_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE fleet_loops ADD COLUMN prepare_error TEXT;
ALTER TABLE fleet_workers ADD COLUMN token TEXT;
ALTER TABLE fleet_workers ADD COLUMN live_for {real}
"""

# What each running loop holds of the day's dollar budget (issue 26 item 6b, registry/limits.py):
# the expected cost of the iterations it has started or may start and has not recorded yet, held
# while the loop runs. NULL: an iteration whose cost nothing is known of yet.
RESERVATIONS = "ALTER TABLE fleet_loops ADD COLUMN reserved {real} DEFAULT 0"

# When a worker said it stopped (issue 27 part 4): `fleet workers`, the page and the metrics tell
# a worker that left (stopped_at at or after its last beat) from one that went silent.
WORKER_STOPPED = "ALTER TABLE fleet_workers ADD COLUMN stopped_at {real}"

# Why a fleet loop failed (issue 27 part 2): the last error its client or its worker gave up on
# (an API error, a runner that could not start), scrubbed and bounded by the worker.
CAUSES = "ALTER TABLE fleet_loops ADD COLUMN last_error TEXT"

# (version, name, SQL, then a step in Python or None). The SQL is one text for both databases,
# or a dict {dialect: text} where they differ.
STEPS = [
    (1, "runs", RUNS, _runs_pid_started),
    (2, "fleet", {d: FLEET.replace("{serial}", s) for d, s in SERIAL.items()}, None),
    (3, "limits", LIMITS, None),
    (4, "items", ITEMS, None),
    (5, "worker_policy", WORKER_POLICY, None),
    (6, "claims", {d: sql + ";" + CLAIM_COLUMNS for d, sql in CLAIMS.items()}, None),
    (7, "reservations", RESERVATIONS, None),
    (8, "worker_stopped", WORKER_STOPPED, None),
    (9, "causes", CAUSES, None),
]


def sql_for(sql: str | dict, dialect: str) -> str:
    if isinstance(sql, dict):
        sql = sql[dialect]
    return sql.replace("{real}", "DOUBLE PRECISION" if dialect == "postgres" else "REAL")
