"""Parse the raw argument text of a slash command, such as

    /loopwright:loop "Fix the flaky test" --max-iterations 10 --completion-promise DONE

The text arrives verbatim (through a quoted heredoc, never through a shell that
could run it). Options are recognised at the start and at the end of the text,
in ``--name value`` or ``--name=value`` form; ``--`` ends the options. What lies
between is the prompt, exactly as typed; if it is a single quoted string, the
quotes are removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from loopwright.core.errors import UserError


class ArgError(UserError, ValueError):
    pass


@dataclass
class Token:
    start: int
    end: int
    value: str  # unquoted
    quoted: bool


def _quoted(text: str, i: int) -> tuple[int | None, str]:
    """The quoted string opening at ``text[i]``: (index after it, its content),
    or (None, "") when the quote is never closed."""
    q = text[i]
    if q == "'":
        close = text.find("'", i + 1)
        return (close + 1, text[i + 1 : close]) if close >= 0 else (None, "")
    j, buf = i + 1, []
    while j < len(text):
        c = text[j]
        if c == '"':
            return j + 1, "".join(buf)
        if c == "\\" and j + 1 < len(text) and text[j + 1] in '"\\':
            j += 1
            c = text[j]
        buf.append(c)
        j += 1
    return None, ""


def tokenize(text: str) -> list[Token]:
    """Shell-like words with their spans. Quotes group; nothing is expanded.
    A quote that is never closed counts as an ordinary character."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        start, out, quoted = i, [], False
        while i < n and not text[i].isspace():
            ch = text[i]
            if ch in "'\"":
                end, value = _quoted(text, i)
                if end is not None:
                    quoted = True
                    out.append(value)
                    i = end
                    continue
                # An unmatched quote is just a character (e.g. an apostrophe).
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            out.append(ch)
            i += 1
        tokens.append(Token(start, min(i, n), "".join(out), quoted))
    return tokens


def parse(text: str, spec: dict[str, bool]) -> tuple[str, dict[str, str | bool]]:
    """Split ``text`` into (prompt, options). ``spec`` maps option names (with
    dashes) to whether they take a value. Options stand before the prompt or after
    it; ``--`` ends the leading ones and turns the trailing ones off."""
    p = _Parser(text, spec)
    lo, explicit_end = p.leading()
    hi = len(p.tokens) if explicit_end else p.trailing(lo)
    return p.body(lo, hi), p.options


class _Parser:
    def __init__(self, text: str, spec: dict[str, bool]):
        self.text, self.spec = text, spec
        self.tokens = tokenize(text)
        self.options: dict[str, str | bool] = {}

    def option_at(self, k: int) -> tuple[str, str | None] | None:
        tok = self.tokens[k]
        if tok.quoted or not tok.value.startswith("--") or tok.value == "--":
            return None
        name, eq, val = tok.value.partition("=")
        if name not in self.spec:
            raise ArgError(
                f"unknown option {name}; known options: {', '.join(sorted(self.spec))} "
                "(put the prompt in quotes, or after --, if it starts or ends with --words)"
            )
        return name, (val if eq else None)

    def take(self, name: str, inline: str | None, value_tok: Token | None) -> None:
        if name in self.options:
            raise ArgError(f"option {name} is given twice")
        if self.spec[name]:
            if inline is None and value_tok is None:
                raise ArgError(f"option {name} needs a value")
            self.options[name] = inline if inline is not None else value_tok.value
        elif inline is not None:
            raise ArgError(f"option {name} takes no value")
        else:
            self.options[name] = True

    def leading(self) -> tuple[int, bool]:
        """Options before the prompt; where the prompt starts, and whether ``--`` ended them."""
        lo, hi = 0, len(self.tokens)
        while lo < hi:
            tok = self.tokens[lo]
            if not tok.quoted and tok.value == "--":
                return lo + 1, True
            opt = self.option_at(lo)
            if opt is None:
                break
            name, inline = opt
            if self.spec[name] and inline is None:
                if lo + 1 >= hi:
                    raise ArgError(f"option {name} needs a value")
                self.take(name, None, self.tokens[lo + 1])
                lo += 2
            else:
                self.take(name, inline, None)
                lo += 1
        return lo, False

    def trailing(self, lo: int) -> int:
        """Options after the prompt, taken from the end; where the prompt ends."""
        hi = len(self.tokens)
        while hi > lo:
            last = self.option_at(hi - 1)
            if last is not None and (not self.spec[last[0]] or last[1] is not None):
                self.take(last[0], last[1], None)
                hi -= 1
                continue
            pair = self.option_at(hi - 2) if hi - 2 >= lo else None
            if pair is not None and self.spec[pair[0]] and pair[1] is None:
                self.take(pair[0], None, self.tokens[hi - 1])
                hi -= 2
                continue
            if last is not None:
                raise ArgError(f"option {last[0]} needs a value")
            break
        return hi

    def body(self, lo: int, hi: int) -> str:
        if lo >= hi:
            return ""
        body, text = self.tokens[lo:hi], self.text
        if (
            len(body) == 1
            and body[0].quoted
            and text[body[0].start] in "'\""
            and text[body[0].end - 1] == text[body[0].start]
        ):
            return body[0].value
        return text[body[0].start : body[-1].end].strip()
