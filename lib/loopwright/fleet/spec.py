"""What a fleet loop asks for (its row's ``spec``), checked, as the runner's command line.

A row comes from a database that others can write, so nothing in it reaches a process
unchecked: the kind must be a mode, limits numbers in range, text printable and bounded, and
the goal or the mode's words go after the runner's own options (a goal is one argument after
``--``; a mode's words are parsed by the mode as its own command line, never by a shell).
Notifiers are not taken from the database (a ``command:`` notifier would run anything on every
worker): a worker notifies as its own ``--notify`` says. A ``verify`` is a shell command: a worker
runs it only when its own ``--allow-verify`` accepts it (fleet/consent.py). Whatever else becomes
a program's argument has the shape of plain data: a judge model is a model's name (not a
provider's path or address), a goal never starts with ``/`` (the runner and Claude Code would
read it as a command line, which could set a verify), and a GitHub repository in a mode's words
is OWNER/NAME (the host is the worker's: gh sends its token there).
"""

from __future__ import annotations

import re

from loopwright.actions.start import MAX_WRAP_UP_FLOOR
from loopwright.core import judge
from loopwright.core.errors import UserError
from loopwright.core.gates import POLICIES

MAX_GOAL = 100_000
MAX_BACKLOG_KEY = 200
LIMITS = {
    "max_iterations": (int, 1, 1_000_000),
    "max_minutes": (float, 0.01, 10_000_000.0),
    "max_tokens": (int, 1, 10**13),
    "max_dollars": (float, 0.0, 1_000_000.0),
    "max_prs": (int, 1, 100_000),
}
TEXT = {"completion_promise": 200, "verify": 4000, "judge_model": 128}
FLAGS = ("judge", "wrap_up")
NUMBERS = {"wrap_up_floor": (0.0, MAX_WRAP_UP_FLOOR), "judge_timeout": (1.0, judge.MAX_TIMEOUT)}
CHOICES = {"gates": POLICIES}
OPTIONS = (*TEXT, *FLAGS, *NUMBERS, *CHOICES)  # a spec's keys beside the goal, args and limits
MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # claude-haiku-4-5, haiku
GITHUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*/(?!\.\.?\Z)[A-Za-z0-9._-]+\Z")  # OWNER/NAME
MODES = ("work", "review", "task")
# `loopwright run`'s own options (tests/fleet/test_spec.py keeps this equal to the command): a
# mode's words follow them on the same command line, and must never set one (--claude would
# choose the program every worker runs).
RUN_OPTIONS = frozenset(
    {
        "--loop", "--session", "--max-iterations", "--max-minutes", "--max-tokens", "--max-dollars",
        "--accept-project-rates", "--wrap-up", "--no-wrap-up", "--wrap-up-floor", "--judge", "--no-judge",
        "--judge-model", "--judge-timeout", "--completion-promise", "--verify", "--name", "--gates",
        "--claude", "--claude-arg", "--plugin-dir", "--poll-seconds", "--stall-polls", "--quota-wait",
        "--notify", "--json", "--carry", "--fleet-items", "--help",
    }
)  # fmt: skip


class SpecError(UserError):
    """A fleet loop's row cannot be run as it is: one line saying what is wrong. ``field`` is the
    spec's key the line starts with, if any (the command line names its option instead)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def as_option(self) -> str:
        """The line as `loopwright submit` says it: --max-iterations, not max_iterations."""
        text = str(self)
        if self.field and text.startswith(self.field):
            return "--" + self.field.replace("_", "-") + text[len(self.field) :]
        return text


def _text(value, what: str, limit: int, *, one_line: bool = True) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{what} must be non-empty text", what)
    if len(value) > limit:
        raise SpecError(f"{what} is {len(value)} characters; the limit is {limit}", what)
    bad = "\0" if not one_line else "\0\r\n"
    if any(c in value for c in bad):
        raise SpecError(f"{what} holds a NUL byte or a line break", what)
    return value


def _limit_args(limits) -> list[str]:
    if limits is None:
        return []
    if not isinstance(limits, dict):
        raise SpecError("limits must be a JSON object")
    args = []
    for key, value in limits.items():
        if key not in LIMITS:
            raise SpecError(f"unknown limit {key!r}: use {', '.join(LIMITS)}")
        kind, lo, hi = LIMITS[key]
        if value is None:
            continue
        number = type(value) in (int, float) and (kind is float or type(value) is int)
        if not number:
            raise SpecError(f"{key} must be a {'whole ' if kind is int else ''}number", key)
        if not lo <= value <= hi:
            raise SpecError(f"{key} must be between {lo} and {hi}", key)
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def _option_args(spec: dict) -> list[str]:
    args = []
    for key, limit in TEXT.items():
        if spec.get(key) is not None:
            args += [f"--{key.replace('_', '-')}", _text(spec[key], key, limit)]
    model = spec.get("judge_model")
    if model is not None and not MODEL.match(model):
        raise SpecError(
            f"judge_model {model[:60]!r} is not a plain model name (letters, digits, '.', '_', '-'; "
            "e.g. claude-haiku-4-5 or haiku)",
            "judge_model",
        )
    for key, (lo, hi) in NUMBERS.items():
        value = spec.get(key)
        if value is None:
            continue
        if type(value) not in (int, float) or not lo <= value <= hi:
            raise SpecError(f"{key} must be a number between {lo:g} and {hi:g}", key)
        args += [f"--{key.replace('_', '-')}", str(value)]
    for key, choices in CHOICES.items():
        value = spec.get(key)
        if value is not None and value not in choices:
            raise SpecError(f"{key} must be one of {', '.join(choices)}", key)
        args += [f"--{key}", value] if value is not None else []
    for key in FLAGS:
        value = spec.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise SpecError(f"{key} must be true or false", key)
        args.append(f"--{'' if value else 'no-'}{key.replace('_', '-')}")
    return args


def runner_args(kind: str, spec) -> list[str]:
    """``loopwright run`` arguments for a row's kind and spec (its limits, options, then the goal
    after ``--`` or the mode's words); SpecError when the row cannot be run as it is."""
    if not isinstance(spec, dict):
        raise SpecError("the loop's spec is not a JSON object")
    args = _limit_args(spec.get("limits")) + _option_args(spec)
    backlog_of(kind, spec)
    if kind == "prompt":
        goal = _text(spec.get("goal"), "the goal", MAX_GOAL, one_line=False)
        if goal.lstrip().startswith("/"):
            raise SpecError(
                "a fleet loop's goal may not start with '/' (it would be read as a command line): "
                "reword it, or submit a mode (submit work|review|task …)"
            )
        return [*args, "--", goal]
    if kind not in MODES:
        raise SpecError(f"unknown kind {kind!r}: prompt, {', '.join(MODES)}")
    words = spec.get("args") or []
    if not isinstance(words, list) or len(words) > 64:
        raise SpecError("a mode's args must be a list of at most 64 words")
    for word in words:
        _text(word, "a mode's word", 4000)
        if word.split("=", 1)[0] in RUN_OPTIONS:
            raise SpecError(f"a mode's words may not set the runner's own option {word.split('=', 1)[0]}")
    mode_words(kind, words)
    _github_repos(words)
    _mode_takes(kind, spec)
    return [*args, kind, *words]


def _mode_options(kind: str) -> dict:
    """The options the mode's own command takes (its slash part's tables: name -> takes a value)."""
    from loopwright import modes

    part = modes.part(kind, "slash")
    known: dict = {}
    for table in ("OPTIONS", "AUTO_OPTIONS"):
        known.update(getattr(part, table, None) or {})
    return known


def mode_words(kind: str, words: list[str]) -> None:
    """SpecError unless the mode's own parser takes ``words`` as options and values: a word
    starting with '-' that is no option of the mode (``-h`` above all: the runner would print
    its help and exit, never running the loop) is refused, whatever its place."""
    import shlex

    from loopwright.core import slashargs

    known = _mode_options(kind)
    value_next = False
    for word in words:
        if value_next or not word.startswith("-"):
            value_next = False
            continue
        name, eq, _ = word.partition("=")
        if name not in known:
            shown = ", ".join(sorted(known))
            raise SpecError(f"{word[:40]!r} is not an option of the {kind} mode (its options: {shown})")
        value_next = bool(known[name]) and not eq
    try:
        slashargs.parse(" ".join(shlex.quote(w) for w in words), known)
    except slashargs.ArgError as exc:
        raise SpecError(f"the {kind} mode's words: {exc}") from None


def _mode_takes(kind: str, spec: dict) -> None:
    """The runner hands a mode's loop only the options its command line takes (`run work
    --judge` is refused there): refused here instead, before any worker claims the loop."""
    from loopwright import modes

    known = _mode_options(kind) if kind in modes.names() else {}
    asked = [k for k, v in (spec.get("limits") or {}).items() if v is not None]
    asked += [k for k in OPTIONS if spec.get(k) is not None]
    for key in asked:
        flag = f"--{'no-' if spec.get(key) is False else ''}{key.replace('_', '-')}"
        if flag not in known:
            raise SpecError(f"{key} does not apply to a {kind} loop", key)


def _github_repos(words: list[str]) -> None:
    """A mode's ``--repo`` (the GitHub repository gh reads and writes) is OWNER/NAME: a host in
    it would send the worker's GitHub token to a host the row chose."""
    for i, word in enumerate(words):
        if word == "--repo" and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith("--repo="):
            value = word.partition("=")[2]
        else:
            continue
        if not GITHUB_REPO.match(value):
            raise SpecError(
                f"--repo {value[:80]!r} in a mode's words: give OWNER/NAME (a GitHub host is the worker's "
                "own: github.com or its $GH_HOST)"
            )


def backlog_of(kind: str, spec) -> str | None:
    """The key of the backlog a loop shares with the other loops of its `submit --parallel`
    (items are claimed per key in the database), or None for a loop on its own; SpecError for a
    key that is not text, or on a kind whose mode does not share a backlog."""
    key = spec.get("backlog") if isinstance(spec, dict) else None
    if key is None:
        return None
    from loopwright import modes

    shares = kind in modes.names() and getattr(modes.get(kind), "shares_backlog", False)
    if not shares:
        raise SpecError(
            f"a {kind} loop does not share a backlog with other loops (--parallel is for work loops)"
        )
    return _text(key, "the backlog key", MAX_BACKLOG_KEY)


def limits_of(spec) -> dict:
    """The spec's limits (checked), for the fleet's own accounting."""
    _limit_args(spec.get("limits") if isinstance(spec, dict) else None)
    return dict(spec.get("limits") or {}) if isinstance(spec, dict) else {}
