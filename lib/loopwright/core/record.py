"""A small base for plain data classes.

The Stop hook runs after every turn, and importing ``dataclasses`` (which pulls in
``inspect``) costs it several milliseconds; this gives the same declared fields,
keyword or positional construction, defaults, equality, a repr and ``replace``.
"""

from __future__ import annotations

REQUIRED = object()  # a field without a default


class Record:
    """Subclasses list ``FIELDS`` as ``(name, default)`` pairs, in order. A list or dict
    default is copied for each instance; ``REQUIRED`` marks a field without one."""

    FIELDS: tuple = ()
    __slots__ = ()

    def __init__(self, *args, **kw):
        if len(args) > len(self.FIELDS):
            raise TypeError(f"{type(self).__name__} takes at most {len(self.FIELDS)} positional arguments")
        for i, (name, default) in enumerate(self.FIELDS):
            if i < len(args):
                if name in kw:
                    raise TypeError(f"{type(self).__name__} got {name!r} twice")
                value = args[i]
            elif name in kw:
                value = kw.pop(name)
            elif default is REQUIRED:
                raise TypeError(f"{type(self).__name__} needs {name!r}")
            else:
                value = type(default)() if isinstance(default, (list, dict)) else default
            object.__setattr__(self, name, value)
        extra = set(kw)  # what is left is no field of ours
        if extra:
            raise TypeError(f"{type(self).__name__} got unexpected field(s) {', '.join(sorted(extra))}")

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name, _ in self.FIELDS}

    def replace(self, **changes):
        """A copy with ``changes`` applied."""
        return type(self)(**dict(self.as_dict(), **changes))

    def __eq__(self, other):
        return type(other) is type(self) and self.as_dict() == other.as_dict()

    __hash__ = None

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in self.FIELDS)
        return f"{type(self).__name__}({inner})"
