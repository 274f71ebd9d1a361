"""Paths on the Stop hook's path, without importing pathlib.

``import pathlib`` costs a Stop about 7 ms, as much as everything else the owning
session's Stop does: it loads ``re``, ``enum``, ``fnmatch`` and ``urllib.parse`` to
support features loopwright never uses on that path. ``Path`` here is a small POSIX
path with the same meaning for what the hook uses (joining, ``name``, ``parent``,
``with_name``, reading and writing, ``mkdir``, ``unlink``, ``stat``...). It compares
equal to a ``pathlib.Path`` of the same path, and anything else pathlib offers is
handed to ``pathlib.Path`` on first use, so code outside the hook (the CLI, the task
mode's git work, the tests) can treat it as a pathlib path.
"""

from __future__ import annotations

import os


def _normal(text: str) -> str:
    """``text`` written as pathlib writes a POSIX path: no empty or '.' parts, no
    trailing slash, '.' for nothing ('..' is kept: it is not resolved)."""
    root = (
        "//" if text.startswith("//") and not text.startswith("///") else "/" if text.startswith("/") else ""
    )
    parts = [p for p in text.split("/") if p and p != "."]
    return root + "/".join(parts) if root or parts else "."


class Path:
    __slots__ = ("_text",)

    def __init__(self, *parts) -> None:
        text = ""
        for part in parts:
            part = os.fspath(part)
            if not isinstance(part, str):
                raise TypeError(f"a path part must be str or os.PathLike, not {type(part).__name__}")
            if part.startswith("/") or not text:
                text = part
            elif part:
                text = text + part if text.endswith("/") else f"{text}/{part}"
        self._text = _normal(text)

    @classmethod
    def cwd(cls) -> Path:
        return cls(os.getcwd())

    @classmethod
    def home(cls) -> Path:
        return cls(os.path.expanduser("~"))

    # --- a path as text ---------------------------------------------------------------------

    def __fspath__(self) -> str:
        return self._text

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Path({self._text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Path):
            return self._text == other._text
        if isinstance(other, os.PathLike) and not isinstance(other, (str, bytes)):
            other_text = os.fspath(other)
            return isinstance(other_text, str) and self._text == _normal(other_text)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._text)

    def __lt__(self, other: object) -> bool:
        return self._text < os.fspath(other)

    def __truediv__(self, other) -> Path:
        if type(other) is str and other and other != "." and "/" not in other:
            # One plain name (the hook's usual join): nothing to normalise.
            joined = Path.__new__(Path)
            base = self._text
            joined._text = other if base == "." else base + other if base.endswith("/") else f"{base}/{other}"
            return joined
        return Path(self._text, other)

    def __rtruediv__(self, other) -> Path:
        return Path(other, self._text)

    @property
    def name(self) -> str:
        return "" if self._text in ("/", "//", ".") else self._text.rsplit("/", 1)[-1]

    @property
    def parent(self) -> Path:
        head, sep, _ = self._text.rpartition("/")
        if not sep:
            return Path(".")
        if head in ("", "/"):  # the parent is the root ("/", or "//" kept as pathlib keeps it)
            return Path(self._text[: len(head) + 1])
        return Path(head)

    @property
    def parents(self) -> tuple[Path, ...]:
        out, cur = [], self
        while cur.parent != cur:
            cur = cur.parent
            out.append(cur)
        return tuple(out)

    @property
    def suffix(self) -> str:
        name = self.name
        dot = name.rfind(".")
        return name[dot:] if 0 < dot < len(name) - 1 else ""

    @property
    def stem(self) -> str:
        return self.name[: len(self.name) - len(self.suffix)] if self.suffix else self.name

    @property
    def parts(self) -> tuple[str, ...]:
        if self._text == ".":
            return ()
        root = "//" if self._text.startswith("//") else "/" if self._text.startswith("/") else ""
        rest = [p for p in self._text[len(root) :].split("/") if p]
        return (root, *rest) if root else tuple(rest)

    def with_name(self, name: str) -> Path:
        if not self.name or not name or "/" in name or name == ".":
            raise ValueError(f"{self!r} has no name to replace, or {name!r} is not a name")
        return self.parent / name

    def is_absolute(self) -> bool:
        return self._text.startswith("/")

    def absolute(self) -> Path:
        return self if self.is_absolute() else Path(os.getcwd(), self._text)

    def resolve(self) -> Path:
        return Path(os.path.realpath(self._text))

    def expanduser(self) -> Path:
        return Path(os.path.expanduser(self._text))

    def as_posix(self) -> str:
        return self._text

    # --- the file system ----------------------------------------------------------------------

    def exists(self) -> bool:
        return os.path.exists(self._text)

    def is_dir(self) -> bool:
        return os.path.isdir(self._text)

    def is_file(self) -> bool:
        return os.path.isfile(self._text)

    def is_symlink(self) -> bool:
        return os.path.islink(self._text)

    def stat(self) -> os.stat_result:
        return os.stat(self._text)

    def lstat(self) -> os.stat_result:
        return os.lstat(self._text)

    def open(self, mode: str = "r", *args, **kwargs):
        return open(self._text, mode, *args, **kwargs)

    def read_bytes(self) -> bytes:
        with open(self._text, "rb") as fh:
            return fh.read()

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        with open(self._text, encoding=encoding, errors=errors) as fh:
            return fh.read()

    def write_bytes(self, data: bytes) -> int:
        with open(self._text, "wb") as fh:
            return fh.write(data)

    def write_text(self, data: str, encoding: str | None = None, errors: str | None = None) -> int:
        with open(self._text, "w", encoding=encoding, errors=errors) as fh:
            return fh.write(data)

    def mkdir(self, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        try:
            os.mkdir(self._text, mode)
        except FileNotFoundError:
            if not parents or self.parent == self:
                raise
            self.parent.mkdir(mode, parents=True, exist_ok=True)
            self.mkdir(mode, parents=False, exist_ok=exist_ok)
        except OSError:
            if not exist_ok or not self.is_dir():
                raise

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            os.unlink(self._text)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def rmdir(self) -> None:
        os.rmdir(self._text)

    def iterdir(self):
        for name in os.listdir(self._text):
            yield self / name

    def __getattr__(self, attr: str):
        """Anything else pathlib offers (glob, relative_to, touch...), from pathlib itself."""
        if attr.startswith("__") or attr == "_text":
            raise AttributeError(attr)
        import pathlib

        return getattr(pathlib.Path(self._text), attr)
