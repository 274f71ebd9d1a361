"""No test asserts on wall-clock time or sleeps a fixed time to wait for something: on a
busy machine either one fails now and then (issue 19 §7). A test asserts what is
deterministic instead (bytes read, rows parsed, processes started, lines run) and waits
for a condition with a bound; timings belong to `make bench`.

The scan reads every test module's syntax tree and reports
  - an ordering comparison (<, <=, >, >=) that involves a clock read (time.time,
    time.monotonic, time.perf_counter, datetime.now, getrusage ...), a name holding one
    (``t0 = time.monotonic()``, and anything computed from it), or a figure named like a
    timing (``elapsed``, ``duration``, ``took``, ``seconds``, ``*_ms``, ``ratio``);
  - every call of ``sleep``.
Both are allowed only inside the functions of ALLOWED below, each with its reason: the
shared helper a test waits with (tests/waiting.py), older helpers of that kind, and sleeps
that are not waits."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import TESTS

# (file under tests/, function) -> why it may read the clock or sleep.
ALLOWED = {
    # The shared helper for waiting on a condition (tests/waiting.py): use it.
    ("waiting.py", "wait_for"): "polls a condition until a deadline",
    # Older helpers of the same kind, each in its own test module: polling until a deadline
    # only turns a hang into a failure, it measures nothing.
    ("events/test_isolation.py", "wait_for"): "polls a condition until a deadline",
    ("events/test_late_usage.py", "wait_for"): "polls a condition until a deadline",
    ("e2e/test_e2e_budgets.py", "wait_for"): "polls a condition until a deadline",
    ("e2e/test_e2e_page.py", "_stop_file_written"): "polls for the stop file until a deadline",
    # A lower bound on a wait the runner makes: it waits at least the 1.5 s it reports, and a
    # busy machine can only add to that, never take from it.
    ("e2e/test_e2e_run.py", "test_a_usage_limit_is_waited_out_with_the_clock_paused"): (
        "clock_paused_seconds >= 1.4: a lower bound that load cannot break"
    ),
    # `make fleet-demo` (a script, not a test) polls the fleet and its strays until deadlines.
    ("fleet_demo.py", "Watch.until"): "polls the fleet until a deadline",
    ("fleet_demo.py", "main"): "kills stray processes until none is left or a deadline passes",
    ("fleet_demo.py", "play"): "reports the failover time it measured (a figure, never asserted)",
    # `make demo` (a script, not a test) kills what it started until none is left.
    ("demo.py", "clean_up"): "kills stray processes until none is left, a bounded number of times",
    # Sleeps that are not waits.
    ("state/test_fault.py", "kill_at_a_random_instant"): "a random instant to kill at, by design",
    ("state/test_store.py", "test_file_lock_excludes_other_processes.worker"): (
        "holds the lock a moment so that writers overlapping it would interleave"
    ),
}

CLOCK_CALLS = {
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
    "process_time",
    "process_time_ns",
    "thread_time",
    "clock_gettime",
    "now",
    "utcnow",
    "getrusage",
}
CLOCK_MODULES = {"time", "datetime", "resource", "date"}
BARE_CLOCKS = CLOCK_CALLS - {"time", "now"}  # from time import monotonic: a bare name is enough
TIMING = re.compile(r"(^|_)(elapsed|duration|took|seconds|secs|ms|ratio|ru_utime|ru_stime)(_|$)")
ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Name):
        return f.id in BARE_CLOCKS
    if isinstance(f, ast.Attribute) and f.attr in CLOCK_CALLS:
        base = f.value
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        return name in CLOCK_MODULES
    return False


def _timing(expr: ast.AST, tainted: set[str]) -> bool:
    """Whether an expression reads the clock, a name holding a clock value, or a timing figure."""
    for n in ast.walk(expr):
        if _is_clock_call(n):
            return True
        if isinstance(n, ast.Name) and (n.id in tainted or TIMING.search(n.id.lower())):
            return True
        if isinstance(n, ast.Attribute) and TIMING.search(n.attr.lower()):
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and TIMING.search(n.value.lower()):
            return True
    return False


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
        return [node.target]
    return []


def _tainted(scope: ast.AST) -> set[str]:
    """Names assigned, in this scope, from a clock read or from another such name."""
    tainted: set[str] = set()
    while True:
        before = len(tainted)
        for node in ast.walk(scope):
            value = getattr(node, "value", None)
            if _targets(node) and value is not None and _timing(value, tainted):
                for t in _targets(node):
                    tainted |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        if len(tainted) == before:
            return tainted


def _is_sleep(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return getattr(f, "id", None) == "sleep" or getattr(f, "attr", None) == "sleep"


def scan(source: str) -> list[tuple[str, int, str]]:
    """(function, line, what) for each clock comparison and each sleep in ``source``."""
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, name: str, tainted: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = child.name if name == "<module>" else f"{name}.{child.name}"
                visit(child, inner, tainted | _tainted(child))
                continue
            ordered = isinstance(child, ast.Compare) and any(isinstance(op, ORDER) for op in child.ops)
            if ordered and any(_timing(e, tainted) for e in [child.left, *child.comparators]):
                found.append((name, child.lineno, "compares a time"))
            if _is_sleep(child):
                found.append((name, child.lineno, "sleeps"))
            visit(child, name, tainted)

    tree = ast.parse(source)
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    top = ast.Module(body=[n for n in tree.body if not isinstance(n, defs)], type_ignores=[])
    visit(tree, "<module>", _tainted(top))
    return found


def test_no_test_compares_wall_clock_times_or_sleeps_to_wait():
    found, used = [], set()
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        if any(part.startswith(".") or part == "node_modules" for part in Path(rel).parts):
            continue  # a cache, not the suite's code
        for func, line, what in scan(path.read_text()):
            if (rel, func) in ALLOWED:
                used.add((rel, func))
            else:
                found.append(f"tests/{rel}:{line} ({func}) {what}")
    assert not found, (
        "assert what is deterministic (bytes, rows, processes, lines run), wait for a condition "
        "with waiting.wait_for (tests/waiting.py), and leave timings to `make bench`; a sleep "
        "that is not a wait goes in ALLOWED with its reason:\n" + "\n".join(found)
    )
    assert used == set(ALLOWED), f"ALLOWED entries that no longer match anything: {set(ALLOWED) - used}"


def test_the_scan_finds_each_pattern_and_passes_deterministic_code():
    bad = {  # the body of a test function f, after `import time`
        "elapsed": ["t0 = time.monotonic()", "g()", "assert time.monotonic() - t0 < 5"],
        "derived": ["t = time.perf_counter()", "d = (time.perf_counter() - t) * 1000", "assert d <= 3"],
        "named": ["msg, took = run()", "assert msg == '' and took < 1.0"],
        "key": ["assert res['growth_4x']['router_render_ms'] <= 6.0"],
        "from a key": ["best = res['min_ms']", "assert best['a'] <= 3 * best['b']"],
        "datetime": [
            "t = datetime.datetime.now()",
            "assert (datetime.datetime.now() - t).total_seconds() < 1",
        ],
        "sleep": ["start()", "time.sleep(0.5)", "check()"],
        "stamp": ["stamp = time.time()", "assert stamp + 1 < deadline"],
    }
    for label, body in bad.items():
        assert scan("import time\ndef f(res, deadline):\n" + "".join(f"    {b}\n" for b in body)), label
    assert scan("from time import monotonic\ndef f(t0):\n    assert monotonic() - t0 < 2\n")
    assert scan("import time\nT0 = time.monotonic()\ndef f():\n    assert T0 > 0\n")
    assert scan("import time\ndef f():\n    def g():\n        time.sleep(1)\n") == [("f.g", 4, "sleeps")]
    # Equality on a figure, counts compared, and timeouts that only bound a wait pass.
    good = (
        "import subprocess\n"
        "def f(res, proc, sizes):\n"
        "    assert res['seconds'] == 1.5 and res['rchar'] <= 65536 and len(sizes) > 1\n"
        "    subprocess.run(['true'], timeout=60)\n"
        "    assert proc.wait(timeout=60) == 0\n"
    )
    assert scan(good) == []


def test_the_allowlist_names_files_that_exist():
    missing = [rel for rel, _ in ALLOWED if not (TESTS / rel).is_file()]
    assert not missing, missing
