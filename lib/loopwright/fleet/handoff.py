"""The handoff a fleet loop's new session starts with, when the loop ran before: on another
machine that went away, or here before it waited at a gate or its worker drained.

It is built from what the database holds (the loop's row and its timeline), all of it text
that others could have written: it is quoted as the record of earlier iterations, never
presented as instructions of the user's."""

from __future__ import annotations

from loopwright.core.termsafe import one_line

MAX_LINES = 30  # iterations shown, the latest


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _iteration(data: dict) -> str:
    """One iteration as the timeline recorded it: its commit (what `git show` tells more of),
    spend, pull requests touched, gates answered and outcome."""
    n = data.get("iteration")
    facts = []
    commit = data.get("commit")
    if isinstance(commit, str) and commit.isalnum():
        facts.append(f"commit {commit[:12]}")
    facts.append(f"${_number(data.get('dollars_this_iter')):.2f}")
    prs = _number(data.get("prs_touched_this_iter"))
    if prs:
        facts.append(f"{prs:.0f} pull request(s) touched")
    gates = data.get("gates") if isinstance(data.get("gates"), list) else []
    for gate in [g for g in gates if isinstance(g, dict)][:3]:
        facts.append(f"gate {one_line(str(gate.get('name')))[:60]}: {one_line(str(gate.get('answer')))[:60]}")
    outcome = one_line(str(data.get("outcome") or "continued"))[:80]
    status = one_line(str(data.get("status_line") or data.get("reason") or ""))[:300]
    return f"- iteration {n} ({', '.join(facts)}): {outcome}" + (f": {status}" if status else "")


def text(row: dict, events: list[dict], gate: dict | None) -> str:
    """The handoff for ``row``'s next session, from its timeline ``events``."""
    done = int(row.get("iteration") or 0)
    lines = [
        f"# Handoff: fleet loop {row['name']} goes on here",
        "",
        f"This loop ran before ({done} iteration(s), {float(row.get('minutes') or 0):.1f} minutes, "
        f"${float(row.get('dollars') or 0):.2f}); its work was pushed to the branch "
        f"`{row.get('work_branch')}` after every iteration, and this clone starts from that branch's "
        "tip. Read `git log` to see what was done; anything not yet committed when the previous "
        "session stopped is gone and has to be redone.",
    ]
    iterations = [e["data"] for e in events if e.get("kind") == "iteration"]
    iterations = [d for d in iterations if isinstance(d, dict)]
    if iterations:
        lines += ["", "What the iterations so far did (recorded by loopwright, latest last):"]
        lines += [_iteration(d) for d in iterations[-MAX_LINES:]]
    if gate and gate.get("answer"):
        name = one_line(str(gate.get("name") or "gate"))[:80]
        answer = one_line(str(gate["answer"]))[:80]
        lines += ["", f"The loop waited at gate {name}; the user answered {answer!r}."]
    return "\n".join(lines) + "\n"
