"""The README and docs/ name only what exists: every `loopwright` command and option,
every `/loopwright:` command and every link between the pages; and the README stays
short enough for a newcomer. Commands come from click's own command tree and the
slash commands' option tables, so a renamed option fails here, not in a reader's shell."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from conftest import REPO
from loopwright import modes
from loopwright.actions import start as starting
from loopwright.cli.main import main as ROOT
from loopwright.events import slash as slash_events

ROOT.every()  # the root imports its commands as they are used; the checks below walk them all

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 260
# Programs whose options the docs quote (Claude Code's, git's, gh's …) are not ours to check.
FOREIGN = {"claude", "git", "gh", "pip", "python", "python3", "make", "npm", "notify-send", "chmod"}
# `=--x` is a value passed through (`--claude-arg=--permission-mode=…`), not an option of ours.
OPTION_RE = re.compile(r"(?<![\w=/-])--[a-z][a-z0-9-]*")
SLASH_RE = re.compile(r"/loopwright:([a-z][a-z-]*)")
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SPAN_RE = re.compile(r"`([^`]+)`")
# The built-in slash commands parse their own options (events/slash.py).
BUILT_IN_OPTIONS = {
    "loop": set(starting.START_OPTIONS),
    "resume": set(slash_events.RESUME_OPTIONS),
    "cancel": {"--reason"},  # parsed inline by events/slash.py's _cancel
    "answer": set(),
}


def options_of(command: click.Command) -> set[str]:
    found = {"--help"}
    for param in command.params:
        found |= {o for o in [*param.opts, *param.secondary_opts] if o.startswith("--")}
    return found


def all_commands(command: click.Command = ROOT):
    yield command
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from all_commands(sub)


def mode_slash_options(name: str) -> set[str]:
    """Every option table (``*OPTIONS``) of a mode's slash module."""
    part = modes.part(name, "slash")
    tables = vars(part).items() if part else ()
    return {o for k, v in tables if k.endswith("OPTIONS") and isinstance(v, dict) for o in v}


def every_option() -> set[str]:
    found = {o for c in all_commands() for o in options_of(c)}
    found |= {o for opts in BUILT_IN_OPTIONS.values() for o in opts}
    return found | {o for name in modes.names() for o in mode_slash_options(name)}


EVERY_OPTION = every_option()


def fragments(text: str):
    """(line number, text, is_code) for each line of a fenced block, each inline code span
    (which may run over a line break) and each paragraph of prose, its code spans blanked
    out (line breaks kept, so links and line numbers stay findable)."""
    block: list[str] = []
    start, fenced = 1, False
    for number, line in enumerate(text.splitlines(), 1):
        if fenced or line.lstrip().startswith("```") or not line.strip():
            yield from paragraph(block, start)
            block = []
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            yield number, line.split(" # ")[0].replace("\\|", "|"), True
        elif line.strip():
            start = number if not block else start
            block.append(line)
    yield from paragraph(block, start)


def paragraph(lines: list[str], start: int):
    joined = "\n".join(lines)
    for span in SPAN_RE.finditer(joined):
        code = " ".join(span.group(1).split()).replace("\\|", "|")
        yield start + joined.count("\n", 0, span.start()), code, True
    if lines:
        yield start, SPAN_RE.sub(lambda m: "``" + "\n" * m.group(0).count("\n"), joined), False


def walk(words: list[str]) -> tuple[list[click.Command], int, str | None]:
    """The commands `loopwright WORDS…` names (several for `task add|list`), how many words
    name them, and a problem line when one does not exist. A placeholder (`<cmd>`, NAME,
    `…`) ends the walk."""
    current: list[click.Command] = [ROOT]
    i = 0
    while i < len(words) and all(isinstance(c, click.Group) for c in current):
        word = words[i]
        if word.startswith("-"):  # an option of the group itself, e.g. -C DIR
            param = next((p for c in current for p in c.params if word in p.opts), None)
            if param is None:
                return current, i, f"`loopwright` has no option {word}"
            i += 1 if getattr(param, "is_flag", False) else 2
            continue
        if not re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", word):
            break
        subs = [c.commands.get(n) for c in current for n in word.split("|")]
        if None in subs:
            return current, i, f"no such command: loopwright {' '.join(words[: i + 1])}"
        current, i = subs, i + 1
    return current, i, None


def allowed_after_slash(name: str, words: list[str]) -> set[str]:
    """The options `/loopwright:NAME WORDS…` takes: its own, and for a sub-command the agent
    carries out with the mode's CLI (`/loopwright:task init … --title`), that command's."""
    if name in BUILT_IN_OPTIONS:
        return BUILT_IN_OPTIONS[name] | {"--help"}
    allowed = mode_slash_options(name)
    cli = modes.part(name, "cli")
    first = words[0].split("|") if words else []
    for group in getattr(cli, "COMMANDS", ()):
        if isinstance(group, click.Group):
            allowed |= {o for n in first if n in group.commands for o in options_of(group.commands[n])}
    return allowed


def check_code(code: str) -> tuple[list[str], set[str] | None, str]:
    """Problems with the command a code fragment names, the options allowed after it (None:
    another program's, unchecked) and the text those options are read from."""
    words = code.split()
    head = words[0] if words else ""
    if head.rsplit("/", 1)[-1] == "loopwright":  # also bin/loopwright
        commands, used, problem = walk(words[1:])
        allowed = {o for c in commands for o in options_of(c)}
        rest = words[1 + used :]
        if any(c.context_settings.get("ignore_unknown_options") for c in commands) and rest:
            allowed |= mode_slash_options(rest[0]) if rest[0] in modes.names() else set()
        return ([problem] if problem else []), allowed, " ".join(rest)
    slash = SLASH_RE.match(head)
    if slash:
        return [], allowed_after_slash(slash.group(1), words[1:]), " ".join(words[1:])
    if head in FOREIGN:
        return [], None, code
    return [], EVERY_OPTION, code


def option_problems(text: str, allowed: set[str]) -> list[str]:
    bad = []
    for option in OPTION_RE.findall(text):
        # `--max-…` and `--max-*` stand for a family of options.
        known = any(a.startswith(option) for a in allowed) if option.endswith("-") else option in allowed
        if not known:
            bad.append(f"unknown option {option}")
    return bad


def command_problems(text: str) -> list[str]:
    """Every problem with the commands, options and slash commands ``text`` mentions."""
    problems = []
    for number, code, is_code in fragments(text):
        found = [
            f"unknown slash command /loopwright:{name} (no commands/{name}.md)"
            for name in SLASH_RE.findall(code)
            if not (REPO / "commands" / f"{name}.md").is_file()
        ]
        if is_code:
            bad, allowed, rest = check_code(code)
            found += bad + (option_problems(rest, allowed) if allowed is not None else [])
        else:
            found += option_problems(code, EVERY_OPTION)
        problems += [f"line {number}: {p} (in {code.strip()[:80]!r})" for p in found]
    return problems


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen, fenced = set(), {}, False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")  # GitHub numbers repeats
    return found


def link_problems(path: Path, root: Path = REPO) -> list[str]:
    """Every relative link of ``path`` that leads nowhere: a missing file, a file outside
    ``root``, or an anchor no heading of the target makes."""
    problems = []
    for number, prose, is_code in fragments(path.read_text()):
        for link in [] if is_code else LINK_RE.finditer(prose):
            target, line = link.group(1), number + prose.count("\n", 0, link.start())
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not a file here
                continue
            name, _, anchor = target.partition("#")
            dest = (path.parent / name).resolve() if name else path
            if not dest.is_relative_to(root.resolve()):
                problems.append(f"line {line}: {target} leads outside the repository")
            elif not dest.exists():
                problems.append(f"line {line}: {target} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"line {line}: {target}: {dest.name} has no heading #{anchor}")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_option_and_slash_command_named_exists(path):
    problems = command_problems(path.read_text())
    assert not problems, f"{path.relative_to(REPO)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path):
    problems = link_problems(path)
    assert not problems, f"{path.relative_to(REPO)}:\n" + "\n".join(problems)


def test_the_readme_stays_short():
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_the_index_lists_every_page():
    index = (REPO / "docs" / "README.md").read_text()
    linked = {t.partition("#")[0] for t in LINK_RE.findall(index)}
    missing = [p.name for p in DOCS[1:] if p.name != "README.md" and p.name not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


def test_every_built_in_slash_command_has_its_options_here():
    """A new built-in slash command needs its options in BUILT_IN_OPTIONS above."""
    assert set(slash_events.BUILT_IN) <= set(BUILT_IN_OPTIONS)


def test_the_checks_catch_what_does_not_exist(tmp_path):
    text = "\n".join(
        [
            "Run `loopwright frobnicate` or `loopwright task add --colour red`.",
            "Then `/loopwright:nothing`, `/loopwright:work --loop --nonsense` and `--no-such-thing`;",
            "a span may run on: `loopwright review",
            "wait --max-minutes 5` (not an option of review wait).",
            "```sh",
            "loopwright run work --bogus   # --fine-in-a-comment",
            "```",
        ]
    )
    problems = "\n".join(command_problems(text))
    for expected in (
        "no such command: loopwright frobnicate",
        "unknown option --colour",
        "unknown slash command /loopwright:nothing",
        "unknown option --nonsense",
        "unknown option --no-such-thing",
        "unknown option --bogus",
        "line 3: unknown option --max-minutes (in 'loopwright review wait --max-minutes 5')",
    ):
        assert expected in problems
    assert "--fine-in-a-comment" not in problems
    (tmp_path / "b.md").write_text("# Somewhere `here`, too\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[x](b.md#nowhere) [y](missing.md) [z](b.md#somewhere-here-too) [w](https://x.org)\n"
        "\n[v](../../etc/passwd) and [u](#no-such-heading)\n"
    )
    assert [p.split(": ", 1)[1] for p in link_problems(page, tmp_path)] == [
        "b.md#nowhere: b.md has no heading #nowhere",
        "missing.md does not exist",
        "../../etc/passwd leads outside the repository",
        "#no-such-heading: a.md has no heading #no-such-heading",
    ]


def test_the_checks_accept_what_exists():
    text = "\n".join(
        [
            "`loopwright gate answer budget-escalation raise --max-dollars 40`",
            "`loopwright -C DIR status --json`",
            "`/loopwright:task init demo --title T`, `/loopwright:task auto demo --stop`",
            "`loopwright run review --pr 3 --max-minutes 240`, `loopwright task add|list --json`",
            "`--claude-arg=--permission-mode=acceptEdits`, `claude --plugin-dir x`",
            "`/loopwright:resume --max-… N`, `loopwright review wait [--max-wait S]`",
        ]
    )
    assert command_problems(text) == []
