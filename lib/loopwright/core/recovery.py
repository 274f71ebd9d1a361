"""What the headless runner does when its Claude Code client stops or stalls, and the
exit code a run ends with. Pure: the runner observes, this decides.

The Stop hook drives the iterations inside the client exactly as in an interactive
session; the runner only brings the client back when it went away while the loop
still runs (Claude Code's block cap, a crash, an API error it gave up on, a stall),
within a bound per iteration and in all (the ai-cli-task seed: 3 and 10).
"""

from __future__ import annotations

END, RESUME, GIVE_UP, WAIT_FOR_USER = "end", "resume", "give_up", "wait_for_user"
STALL_LIMIT = "STOPPED:stall_limit"
QUOTA_LIMIT = "STOPPED:quota_limit"
QUOTA_WAITS = 10  # usage-limit waits in a row before the run gives up
QUOTA_BASE, QUOTA_CAP = 60.0, 1800.0  # seconds: the backoff when no reset time is given

PER_ITERATION = 3
IN_ALL = 10

# Exit codes of `loopwright run` (docs/unattended.md has the table).
EXIT_DONE, EXIT_ERROR, EXIT_BUDGET, EXIT_STALLED, EXIT_STOPPED, EXIT_WAITING, EXIT_OTHER = 0, 1, 2, 3, 4, 5, 6
EXIT_INTERRUPTED = 130
# Outcomes that mean the loop's work is finished: its goal done, its backlog empty, its PR over.
FINISHED = ("LOOP_DONE", "BACKLOG_EMPTY", "PR_TERMINAL")


class Counts:
    """Recoveries so far: in all, and per iteration number."""

    __slots__ = ("total", "by_iteration")

    def __init__(self) -> None:
        self.total = 0
        self.by_iteration: dict[int, int] = {}

    def add(self, iteration: int) -> None:
        self.total += 1
        self.by_iteration[iteration] = self.by_iteration.get(iteration, 0) + 1


def after_client(
    active: bool,
    waiting_gates: list[str],
    iteration: int,
    counts: Counts,
    why: str,
    per_iteration: int = PER_ITERATION,
    in_all: int = IN_ALL,
) -> tuple[str, str]:
    """The client is gone (``why``: it exited, or was stopped as stalled): the next move
    and the reason for it."""
    if not active:
        return END, "the loop has ended"
    if waiting_gates:
        return WAIT_FOR_USER, (
            f"the loop waits for an answer to gate(s) {', '.join(waiting_gates)}; answer with "
            "`loopwright gate answer <gate> <option>`, then continue with `loopwright run --loop <name>`"
        )
    done_here = counts.by_iteration.get(iteration, 0)
    if done_here >= per_iteration:
        return GIVE_UP, f"{why}; already recovered {done_here} times in iteration {iteration}"
    if counts.total >= in_all:
        return GIVE_UP, f"{why}; already recovered {counts.total} times in this run"
    return RESUME, why


def hit_usage_limit(result: dict | None) -> bool:
    """Whether the client's last turn ended on a usage or rate limit (HTTP 429) it gave up on."""
    return isinstance(result, dict) and result.get("api_error_status") == 429


def quota_wait(
    result_text: str, attempt: int, now: float, base: float = QUOTA_BASE, cap: float = QUOTA_CAP
) -> float:
    """Seconds to wait before trying again: until the reset time the limit message gives (a
    Unix time after a '|', as in "usage limit reached|1760000000"), else a doubling backoff."""
    tail = result_text.rsplit("|", 1)[-1].strip() if "|" in result_text else ""
    if tail.isdigit() and len(tail) == 10 and int(tail) > now:
        return min(int(tail) - now + 5.0, 24 * 3600.0)
    return min(base * (2**attempt), cap)


def stalled(quiet_polls: int, polls: int) -> bool:
    """Whether the client has shown no sign of progress for ``polls`` polls in a row."""
    return quiet_polls >= polls


def exit_code(outcome: str | None, waiting: bool = False) -> int:
    """The exit code of a run that ended with ``outcome`` (None: the loop did not end)."""
    if waiting:
        return EXIT_WAITING
    if outcome is None:
        return EXIT_ERROR
    if outcome in FINISHED:
        return EXIT_DONE
    if outcome == STALL_LIMIT:
        return EXIT_STALLED
    if outcome == "MAX_ITERATIONS" or outcome.startswith("BUDGET_EXHAUSTED:"):
        return EXIT_BUDGET
    if outcome == "CANCELLED" or outcome.startswith(("STOPPED:", "GATE_STOP:")):
        return EXIT_STOPPED
    return EXIT_OTHER
