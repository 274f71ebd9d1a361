"""What a review loop tells the agent: the first turn, a round, a wait, a gate, a merge. Pure text."""

from __future__ import annotations

from loopwright.core.modeapi import PromptParts, Tick

WAIT_COMMAND = "loopwright review wait"


def _pr(loop: dict) -> str:
    cfg = loop.get("review") or {}
    return f"PR #{cfg.get('pr')} of {(cfg.get('repo') or {}).get('slug')}"


def survey(loop: dict) -> str:
    return (
        f"This review loop watches {_pr(loop)}: one review-response round each time it moves, until it is "
        "merged or closed. loopwright reads the PR when this turn ends and tells you what to do. Reply with "
        "one short line and end your turn now."
    )


def next_prompt(loop: dict, st: dict, parts: PromptParts, tick: Tick) -> str:
    lines = parts.lead()
    turn = st.get("turn")
    if turn == "gate":
        lines.append(
            "In a review loop this turn is only for the gate above: ask the user, record the answer, then "
            "end your turn without other work, whatever the answer; do not merge in this turn. loopwright "
            "acts on the answer when this turn ends. This turn does not count as an iteration."
        )
    elif turn == "wait":
        lines += wait_text(loop, st)
    elif turn == "merge":
        lines.append(
            f"The user approved the merge of {_pr(loop)}. Run `loopwright review merge` now (once), tell the "
            "user what it printed, and end your turn."
        )
    elif turn == "survey":
        lines.append("Reply with one short line and end your turn; loopwright reads the PR again.")
    else:
        lines += round_text(loop, st, tick)
    return "\n".join(lines)


def wait_text(loop: dict, st: dict) -> list[str]:
    return [
        f"Nothing to do on {_pr(loop)} until it moves: {st.get('why') or 'waiting'}.",
        f"Run `{WAIT_COMMAND}` with the Bash tool's timeout set to 600000 ms: it returns as soon as "
        "the PR gets "
        "new commits, new reviews or comments, finished CI or a new state, or after at most 9 "
        "minutes. Then end "
        "your turn without other work. A turn spent waiting does not count as an iteration; a turn that "
        "ends without running the wait does.",
    ]


def round_text(loop: dict, st: dict, tick: Tick) -> list[str]:
    cfg = loop.get("review") or {}
    n = cfg.get("pr")
    since = st.get("since")
    head, branch = str(st.get("head") or ""), st.get("branch") or "its branch"
    lines = [
        f"Iteration {tick.iteration + 1}: one review-response round on {_pr(loop)} (head "
        f"{head[:12]}, branch {branch})."
    ]
    if st.get("respond_only"):
        lines.append(
            "There are no new commits since the previous iteration, only new comments: do not submit a new "
            "review; answer the new comments (step 2) and re-evaluate."
        )
    else:
        what = f"the changes since {str(since)[:12]}" if since else "the whole change"
        lines.append(f"1. Review {what} (`gh pr diff {n}`) and post your review comments.")
    lines += [
        "2. Respond: address the open review comments, the humans' and yours, with commits pushed "
        f"to {branch}, "
        "and reply to each thread.",
        "3. Re-evaluate once. Exactly one round: do not start a second review in this turn.",
        "4. If nothing is left open and the checks pass, run `loopwright review merge`: it merges, "
        "or stops and "
        "says why (after you addressed a human's comments the user decides first). Never merge with `gh pr "
        "merge` yourself.",
        "loopwright counts the comments and replies you push from GitHub. If the round failed, report it: "
        f"`loopwright report --outcome failure --item '#{n}' --root-cause '<one line>'`. Then end your turn.",
    ]
    return lines
