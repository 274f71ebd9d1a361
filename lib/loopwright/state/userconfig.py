"""The user's own loopwright settings: ``config.json`` beside the key that signs loops
(``$XDG_CONFIG_HOME/loopwright/``, else ``~/.config/loopwright/``).

It may name commands to run (``command:`` notifiers), so it is read only when this user
owns it, nobody else can change it or its directory, and it is a regular file (no
symlink, no FIFO). Anything else is a ConfigProblem, never a setting.
"""

from __future__ import annotations

import os
import stat

from loopwright.core import jsoncodec
from loopwright.state.fspath import Path
from loopwright.state.store import others_can_change
from loopwright.state.trust import key_path

FILENAME = "config.json"
MAX_BYTES = 64 * 1024


class ConfigProblem(Exception):
    """config.json exists but cannot be trusted or read."""


def config_path() -> Path:
    return key_path().parent / FILENAME


def load() -> dict:
    """The settings; {} when there is no config.json. Raises ConfigProblem."""
    path = config_path()
    try:
        why = others_can_change(os.stat(path.parent))
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigProblem(f"{path.parent} cannot be read ({exc.strerror})") from None
    if why:
        raise ConfigProblem(f"{path.parent} {why}; its {FILENAME} is not used")
    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigProblem(f"{path} cannot be opened ({exc.strerror}); it must be a regular file") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigProblem(f"{path} is not a regular file")
        why = others_can_change(st)
        if why:
            raise ConfigProblem(f"{path} {why}; it is not used")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ConfigProblem(f"{path} is larger than {MAX_BYTES} bytes")
    try:
        value = jsoncodec.loads(data)
    except ValueError as exc:
        raise ConfigProblem(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigProblem(f"{path} must hold a JSON object")
    return value


def notifiers() -> list[str] | None:
    """``notify`` of config.json: the user's notifiers (None when it names none)."""
    found = load().get("notify")
    if found is None:
        return None
    if not isinstance(found, list) or not all(isinstance(s, str) for s in found):
        raise ConfigProblem(f'{config_path()}: "notify" must be a list of strings such as "desktop"')
    return list(found)
