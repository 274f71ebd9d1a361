"""CPU time of the task registry on large tasks.jsonl files: `loopwright task list` as a
process, and the Stop hook's task rendering (load + materialize + render under the
prompt budget) in process. Sizes double; the times must grow no worse than linearly.

    python bench/bench_tasks.py [--lines 100000] [--runs 5] [--check] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "lib"))

from loopwright.state import tasks  # noqa: E402


def make(path: Path, n: int) -> None:
    """n lines: adds, completions of every third task, a tombstone every tenth."""
    with open(path, "w") as fh:
        i = made = 0
        while made < n:
            i += 1
            fh.write(
                json.dumps(
                    {
                        "id": f"task-{i}",
                        "type": "task",
                        "text": f"work item {i} with a realistic description",
                        "status": "open",
                        "source": "manual",
                        "created": "2026-11-22T10:00:00Z",
                    }
                )
                + "\n"
            )
            made += 1
            if i % 3 == 0 and made < n:
                fh.write(
                    json.dumps(
                        {
                            "id": f"task-{i}",
                            "type": "task",
                            "text": f"work item {i} with a realistic description",
                            "status": "done",
                            "source": "manual",
                            "created": "2026-11-22T10:00:00Z",
                            "completed": "2026-11-22T11:00:00Z",
                        }
                    )
                    + "\n"
                )
                made += 1
            if i % 10 == 0 and made < n:
                fh.write(
                    json.dumps(
                        {
                            "id": f"tomb-{i}",
                            "type": "task-tombstone",
                            "target_id": f"task-{i - 1}",
                            "reason": "manual",
                            "created": "2026-11-22T12:00:00Z",
                        }
                    )
                    + "\n"
                )
                made += 1


def median_ms(fn, runs: int) -> float:
    """CPU milliseconds (this process and its children), the best of ``runs``: unlike wall
    time, it does not grow when other processes compete for the cores, so the growth
    check means the same on a busy machine as on an idle one."""
    out = []
    for _ in range(runs):
        t = _cpu()
        fn()
        out.append((_cpu() - t) * 1000)
    return min(out)


def _cpu() -> float:
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lw-bench-tasks-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "LOOPWRIGHT"))}
    env["LOOPWRIGHT_PYTHON"] = sys.executable
    sizes = [args.lines // 4, args.lines // 2, args.lines]
    rows = []
    try:
        for n in sizes:
            f = root / f"tasks-{n}.jsonl"
            make(f, n)
            env_n = dict(env, LOOPWRIGHT_TASKS_FILE=str(f))
            cmd = [str(REPO / "bin" / "loopwright"), "-C", str(root), "task", "list"]
            cli = median_ms(
                lambda cmd=cmd, env_n=env_n: subprocess.run(
                    cmd, env=env_n, stdout=subprocess.DEVNULL, check=True
                ),
                args.runs,
            )
            render = median_ms(
                lambda f=f: tasks.render(tasks.load(f), tasks.DEFAULT_PROMPT_BUDGET), args.runs
            )
            rows.append({"lines": n, "task_list_ms": cli, "router_render_ms": render})
        growth = {k: rows[-1][k] / rows[0][k] for k in ("task_list_ms", "router_render_ms")}
        size_ratio = sizes[-1] / sizes[0]
        # "No worse than linear": 4x the lines may cost at most 4x (+25% for noise).
        ok = all(g <= size_ratio * 1.25 for g in growth.values())
        if args.json:
            print(json.dumps({"rows": rows, "growth_4x": growth, "linear": ok}, indent=2))
        else:
            print(f"{'lines':>8}{'task list ms':>14}{'render ms':>12}")
            for r in rows:
                print(f"{r['lines']:>8}{r['task_list_ms']:>14.1f}{r['router_render_ms']:>12.1f}")
            print(
                f"4x lines -> task list x{growth['task_list_ms']:.2f},"
                f" render x{growth['router_render_ms']:.2f} "
                f"({'PASS' if ok else 'MISS'}: no worse than linear)"
            )
        return 0 if ok or not args.check else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
