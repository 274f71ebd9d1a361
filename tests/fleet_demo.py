"""`make fleet-demo`: two workers on one PostgreSQL share three loops, and one of them dies.

Everything is real but the model: a throwaway PostgreSQL cluster (tests/pgcluster.py; as root
its server runs as the ``postgres`` user), a local bare repository as the remote, two
`loopwright worker` processes as if on two machines (each its own name, host, data directory and
HOME), the real Claude Code CLI driving every loop, and the scripted offline model of
tests/fakeapi.py answering each loop by the marker word of its goal. Each iteration the agent
appends a numbered line to notes.md with a real Bash command; the third line ends the loop.

Once all three loops are claimed, the worker that holds one of them is killed (SIGKILL, with
its loop's processes) in the middle of that loop's second iteration. When its lease runs out
the other worker takes the loop over and finishes it from the last pushed iteration.

    python tests/fleet_demo.py          (or: make fleet-demo)

Exit 0 only when all three loops ended LOOP_DONE and the killed worker's loop failed over once.
The cluster, the repository and the workers' directories are removed at the end, also after
an error or Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
sys.path[:0] = [str(TESTS), str(REPO / "lib")]

import claude_cli  # noqa: E402
import fakeapi  # noqa: E402
import pgcluster  # noqa: E402
from proctree import descendants, kill_all, kill_tree  # noqa: E402

LW = str(REPO / "bin" / "loopwright")
LOOPS = {"heron": "sketch", "otter": "survey", "lynx": "index"}  # loop name -> its goal's marker word
NOTES = 3  # iterations of each loop: one note each
HOLD_AT = 2  # the note whose turn waits for the model until the demo lets its loop go
LEASE, WITHIN = 6, 150  # seconds: a worker's lease; the bound on any one wait
HOLD_SECONDS = 300


class Model:
    """The scripted model for every loop at once, told apart by the marker word of the goal a
    conversation started with. It keeps no count of its own: the agent's command prints the
    lines notes.md has, so a loop that moved to another machine goes on where its pushed work
    ends. The turn of note ``HOLD_AT`` waits for the model's first answer (the agent has done
    nothing of it yet) until the demo lets that loop go."""

    def __init__(self, markers) -> None:
        self.go = {m: threading.Event() for m in markers}
        self.waiting = {m: threading.Event() for m in markers}
        self.asked: dict[str, list[float]] = {m: [] for m in markers}  # when each loop's requests came

    def __call__(self, request) -> fakeapi.Reply:
        messages = (request.body or {}).get("messages") or []
        blob = json.dumps(messages)
        marker = next((m for m in self.go if m in blob), None)
        if marker is None:
            return fakeapi.text("Nothing to do here.")
        self.asked[marker].append(time.monotonic())
        written = _count(messages, this_turn=True)
        if written is None:  # a new turn: the next note
            command = f'touch notes.md && echo "{marker} note $(( $(wc -l < notes.md) + 1 ))" >> notes.md'
            reply = fakeapi.bash(f"{command} && wc -l < notes.md", text=f"Writing the next {marker} note.")
            if _count(messages, this_turn=False) == HOLD_AT - 1 and not self.go[marker].is_set():
                self.waiting[marker].set()
                return fakeapi.hang(HOLD_SECONDS, then=reply, release=self.go[marker])
            return reply
        if written >= NOTES:
            return fakeapi.text(f"All {NOTES} {marker} notes are written.\n<promise>DONE</promise>")
        return fakeapi.text(f"Wrote {marker} note {written}.")


def _count(messages: list, this_turn: bool) -> int | None:
    """The count the agent's last command printed: in the messages since the model's last
    answer (the request answers that command; the CLI may add messages after the result), or
    anywhere in the session. None when there is none."""
    for message in reversed(messages):
        if message.get("role") == "assistant" and this_turn:
            return None
        content = message.get("content")
        for block in reversed(content) if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                text = inner if isinstance(inner, str) else " ".join(b.get("text", "") for b in inner or [])
                digits = [w for w in text.split() if w.isdigit()]
                return int(digits[-1]) if digits else 0
    return None


# --- the demo's pieces ------------------------------------------------------------------------


def run(*argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


def lw(*args) -> subprocess.CompletedProcess:
    return run(LW, *args, env=dict(os.environ, LOOPWRIGHT_PYTHON=sys.executable))


def make_remote(root: Path) -> Path:
    """A bare repository with one commit on main: the remote every worker clones and pushes to."""
    bare, seed = root / "remote.git", root / "seed"
    for argv in (
        ["git", "init", "-q", "--bare", "-b", "main", str(bare)],
        ["git", "init", "-q", "-b", "main", str(seed)],
    ):
        run(*argv, check=True)
    (seed / "README.md").write_text("# fleet demo\n")
    ident = ["-c", "user.name=demo", "-c", "user.email=demo@example.invalid"]
    run("git", "-C", str(seed), "add", "README.md", check=True)
    run("git", "-C", str(seed), *ident, "commit", "-q", "-m", "start", check=True)
    run("git", "-C", str(seed), "push", "-q", str(bare), "main", check=True)
    return bare


class Machine:
    """A worker as if on a machine of its own: its name, host, data directory and HOME."""

    def __init__(self, tag: str, url: str, remote: Path, root: Path, model_url: str) -> None:
        self.name, self.host = f"worker-{tag}", f"host-{tag}"
        home, data = root / f"home-{tag}", root / f"data-{tag}"
        home.mkdir()
        (home / ".gitconfig").write_text(f"[user]\n\tname = {self.name}\n\temail = {tag}@example.invalid\n")
        argv = [
            LW, "worker", "--db", url, "--slots", "2", "--allow-repo", f"file://{remote}",
            "--data", str(data), "--name", self.name, "--host", self.host,
            "--lease", str(LEASE), "--heartbeat", "1", "--poll", "0.5",
            "--claude", claude_cli.claude_binary(), "--claude-arg=--dangerously-skip-permissions",
            "--runner-arg=--poll-seconds", "--runner-arg=0.5",
            "--runner-arg=--stall-polls", "--runner-arg=1000",  # a reply held on purpose is no stall
        ]  # fmt: skip
        extra = {"LOOPWRIGHT_PYTHON": sys.executable, "XDG_CONFIG_HOME": str(home / ".config")}
        env = claude_cli.offline_env(model_url, home, extra)
        self.log = root / f"{self.name}.log"
        with open(self.log, "wb") as out:  # its own session: a Ctrl-C reaches the demo alone
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def strays(root: Path) -> list[int]:
    """Processes whose HOME is a machine's under ``root``: whatever a worker started and left
    (a client runs in a session of its own, and outlives a runner killed under it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            env = (entry / "environ").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if any(v.startswith(f"HOME={root}/".encode()) for v in env) and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def kill(machine: Machine) -> None:
    """The machine dies: its worker and everything under it (stopped first, so that nothing
    starts meanwhile), their process groups too, get SIGKILL; nothing gets to say goodbye."""
    kill_tree(machine.proc.pid)
    machine.proc.wait(timeout=60)


def stop(machine: Machine, patience: float) -> None:
    """A worker told to stop (SIGTERM, then a second one: stop now), killed if it lingers
    ``patience`` seconds after each; and whatever it started that outlived it."""
    seen: set[int] = set()
    for _ in range(2):
        if machine.proc.poll() is None:
            seen.update(descendants(machine.proc.pid))
            machine.proc.send_signal(signal.SIGTERM)
            try:
                machine.proc.wait(timeout=patience)
            except subprocess.TimeoutExpired:
                continue
    if machine.proc.poll() is None:
        kill(machine)
    kill_all(sorted(seen))


# --- the fleet as the database shows it --------------------------------------------------------


SHOWN = ("status", "iteration", "host", "outcome")  # a change of one prints the loop's line


class Watch:
    """The loops' rows, and `loopwright fleet ls` lines printed as their states change."""

    def __init__(self, url: str) -> None:
        from loopwright.registry import open_registry

        self.url, self.reg, self.t0 = url, open_registry(url), time.monotonic()
        self.shown: dict[str, tuple] = {}

    def rows(self) -> dict[str, dict]:
        return {r["name"]: r for r in self.reg.fleet_loops()}

    def say(self, text: str) -> None:
        print(f"{time.monotonic() - self.t0:6.1f}s  {text}", flush=True)

    def until(self, test, what: str, machines=()):
        """Polls (printing changes) until ``test(rows)`` is true; its value."""
        deadline = time.monotonic() + WITHIN
        while time.monotonic() < deadline:
            rows = self.rows()
            self.show(rows)
            if got := test(rows):
                return got
            for m in machines:
                if m.proc.poll() is not None:
                    raise RuntimeError(f"{m.name} exited with {m.proc.returncode} while waiting for {what}")
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {WITHIN}s waiting for {what}")

    def show(self, rows: dict[str, dict]) -> None:
        state = {n: tuple(r.get(k) for k in SHOWN) for n, r in rows.items()}
        changed = [n for n in LOOPS if n in state and state[n] != self.shown.get(n)]
        if not changed:
            return
        out = lw("fleet", "ls", "--db", self.url).stdout.splitlines()
        lines = {line.split()[0]: line.rstrip() for line in out if line.strip()}
        for name in changed:
            self.say(f"fleet ls | {lines.get(name, name)}")
            self.shown[name] = state[name]

    def close(self) -> None:
        self.reg.close()


# --- the demo -----------------------------------------------------------------------------------


def all_claimed(rows: dict[str, dict]) -> dict[str, list[str]]:
    """The loops each worker holds, by worker, once every loop is held; else {}."""
    out: dict[str, list[str]] = {}
    for name, r in rows.items():
        if r["status"] == "running" and r["worker"]:
            out.setdefault(r["worker"], []).append(name)
    return out if sum(len(v) for v in out.values()) == len(LOOPS) else {}


def all_ended(rows: dict[str, dict]) -> bool:
    return len(rows) == len(LOOPS) and all(r["status"] == "ended" for r in rows.values())


def play(url: str, remote: Path, root: Path, machines: list[Machine], model: Model, model_url: str):
    """The demo's story; the killed machine and its loop."""
    watch = Watch(url)
    try:
        machines += [Machine(t, url, remote, root, model_url) for t in ("a", "b")]
        watch.until(lambda _: len(watch.reg.workers()) == 2, "both workers to beat", machines)
        for line in lw("fleet", "workers", "--db", url).stdout.splitlines():
            watch.say(f"fleet workers | {line}")
        for name, marker in LOOPS.items():
            goal = f"Write {NOTES} numbered {marker} notes to notes.md, one per iteration"
            out = lw("submit", "--db", url, "--repo", f"file://{remote}", "--name", name,
                     "--completion-promise", "DONE", "--max-iterations", "6", goal)  # fmt: skip
            if out.returncode != 0:
                raise RuntimeError(f"submit {name}: {out.stderr.strip()}")
            watch.say(f"submitted {name}: {goal}")
        # Three loops, two slots a worker: each worker holds one at least.
        held = watch.until(all_claimed, "every loop to be claimed", machines)
        victim = next(m for m in machines if len(held.get(m.name, [])) == 1)
        (loop,) = held[victim.name]
        for name in LOOPS:
            if name != loop:
                model.go[LOOPS[name]].set()
        mid = model.waiting[LOOPS[loop]]  # iteration 1 pushed, iteration 2 asked for
        watch.until(lambda rows: mid.is_set() and rows[loop]["iteration"] >= 1, "the kill's moment", machines)
        watch.say(f"{loop} is in its iteration {HOLD_AT} on {victim.host}: killing {victim.name} (SIGKILL)")
        kill(victim)
        killed_at = time.monotonic()
        model.go[LOOPS[loop]].set()
        watch.say(f"{victim.name} is gone; its lease runs out within {LEASE}s, then {loop} fails over")
        survivors = [m for m in machines if m is not victim]
        watch.until(all_ended, "every loop to end", survivors)
        after = [t for t in model.asked[LOOPS[loop]] if t > killed_at]
        if after:  # the first turn of the loop's next session, on the other machine
            took = after[0] - killed_at
            watch.say(
                f"failover: {loop}'s next iteration began {took:.1f}s after the kill "
                f"({took / LEASE:.2f}x the lease)"
            )
        return victim, loop, watch.rows()
    finally:
        watch.close()


def report(rows: dict[str, dict], remote: Path, victim: Machine, loop: str) -> bool:
    print(f"\n{'loop':<8} {'outcome':<12} {'iterations':>10} {'failovers':>10}  host")
    for name in LOOPS:
        r = rows[name]
        print(f"{name:<8} {r['outcome']:<12} {r['iteration']:>10} {r['failovers']:>10}  {r['host']}")
    print("\npushed branches:")
    git = ("git", "--git-dir", str(remote))
    pushed = {}
    for name in LOOPS:
        pushed[name] = run(*git, "show", f"loopwright/{name}:notes.md").stdout.strip().splitlines()
        print(f"  loopwright/{name}: notes.md = {' | '.join(pushed[name])}")
    # Each loop wrote its notes, one an iteration, however many machines it ran on.
    ok = all(rows[n]["outcome"] == "LOOP_DONE" and rows[n]["iteration"] == NOTES for n in LOOPS)
    ok = ok and all(len(pushed[n]) == NOTES for n in LOOPS)
    ok = ok and rows[loop]["failovers"] == 1 and rows[loop]["host"] != victim.host
    if ok:
        print(f"\nfleet demo finished: three loops LOOP_DONE; {loop} failed over once, from {victim.host}.")
    else:
        print("\nfleet demo FAILED: see the table above")
    return ok


def main() -> int:
    why = pgcluster.unavailable()
    if why:
        print(f"fleet-demo needs a local PostgreSQL server's programs: {why}", file=sys.stderr)
        return 1
    claude_cli.claude_binary()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # cleaned up as after Ctrl-C
    root = Path(tempfile.mkdtemp(prefix="loopwright-fleet-demo-"))
    machines: list[Machine] = []
    cluster, code = None, 1
    try:
        cluster = pgcluster.make_cluster()
        print(f"demo directory: {root}\nPostgreSQL cluster: {cluster.root} (port {cluster.port})\n")
        url = cluster.url(cluster.create_database())
        remote = make_remote(root)
        model = Model(LOOPS.values())
        with fakeapi.ScriptedServer(default=model) as server:
            victim, loop, rows = play(url, remote, root, machines, model, server.url)
            code = 0 if report(rows, remote, victim, loop) else 1
    except (RuntimeError, subprocess.SubprocessError) as exc:
        print(f"\nfleet demo FAILED: {exc}", file=sys.stderr)
        for m in machines:
            print(f"--- the end of {m.name}'s log:\n{m.tail()}", file=sys.stderr)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        code = 130
    finally:
        for m in machines:  # idle at the end of a demo that went well: they leave at once
            stop(m, patience=15 if code == 0 else 3)
        deadline = time.monotonic() + 30
        while (left := strays(root)) and time.monotonic() < deadline:  # a SIGKILL takes a moment
            kill_all(left)
            time.sleep(0.1)
        if cluster is not None:
            cluster.close()
        shutil.rmtree(root, ignore_errors=True)
        print("cleaned up: workers stopped, cluster stopped and removed, demo directory removed")
    return code


if __name__ == "__main__":
    sys.exit(main())
