"""Which loops this user's loopwright created: a per-user key signs loop.json.

A project's ``.loopwright/`` is data anyone could have written: a cloned
repository can ship one, another local user can write one, a hand-made one can
name any command. loopwright acts only on loops whose ``loop.json`` carries a
valid HMAC made with a secret that lives outside every project
(``$XDG_CONFIG_HOME/loopwright/key``, else ``~/.config/loopwright/key``,
0600 in a 0700 directory). The MAC covers the whole configuration, the
project's real path and the loop's name, so a signed file copied to another
project or renamed to another loop no longer verifies.

Standard library only: the Stop hook verifies on every event. The HMAC is the
textbook construction (RFC 2104) over the interpreter's built-in SHA-256 module:
``hashlib`` and ``hmac`` load OpenSSL, about 2 ms of every Stop. The tests check it
against ``hmac`` byte for byte.
"""

from __future__ import annotations

import os
import stat
from _operator import _compare_digest as compare_digest  # what hmac.compare_digest is

from loopwright.core import jsoncodec
from loopwright.state.fspath import Path
from loopwright.state.store import others_can_change

try:  # the built-in SHA-256 (no OpenSSL to load): _sha2 from Python 3.12, _sha256 before
    from _sha2 import sha256 as _sha256
except ImportError:
    try:
        from _sha256 import sha256 as _sha256
    except ImportError:  # pragma: no cover - a build without them
        from hashlib import sha256 as _sha256

KEY_BYTES = 32
DOMAIN = b"loopwright-loop-v1\0"


class KeyProblem(Exception):
    """The key file exists but cannot be trusted (wrong owner, mode, or type)."""


def key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "loopwright" / "key"


def _check_key_dir(directory: Path) -> bool:
    """False when the key's directory does not exist yet; KeyProblem when someone else owns it
    or can write it (they could rename the key away or race their own file into its place)."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise KeyProblem(f"{directory} cannot be read ({exc.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise KeyProblem(f"{directory} is not a directory; move it away and start a loop to make a new key")
    why = others_can_change(st)
    if why:
        fix = "move it away" if why.startswith("belongs") else f"fix it with: chmod 700 '{directory}'"
        raise KeyProblem(f"{directory} {why}; {fix}")
    return True


def _read_key(path: Path) -> bytes | None:
    if not _check_key_dir(path.parent):
        return None
    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KeyProblem(
            f"{path} cannot be opened ({exc.strerror}); it must be a regular file, not a symlink"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyProblem(f"{path} is not a regular file")
        if st.st_uid != os.getuid():
            raise KeyProblem(f"{path} belongs to another user")
        if st.st_mode & 0o077:
            raise KeyProblem(
                f"{path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}); chmod 600 it"
            )
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    key = data.strip()
    if len(key) < KEY_BYTES:
        raise KeyProblem(
            f"{path} is too short to be a loopwright key; delete it and start a loop to make a new one"
        )
    return key


def load_key() -> bytes | None:
    """The key, None when it does not exist yet. Raises KeyProblem when it is unsafe."""
    return _read_key(key_path())


def ensure_key() -> bytes:
    """The key, made on first use (atomically: concurrent first starts agree on one)."""
    path = key_path()
    key = _read_key(path)
    if key is not None:
        return key
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".key.tmp-{os.getpid()}")
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, os.urandom(KEY_BYTES).hex().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process made the key first: theirs wins
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    key = _read_key(path)
    if key is None:  # pragma: no cover - deleted between the two calls
        raise KeyProblem(f"{path} vanished while it was being created")
    return key


def _message(cfg: dict, project: str, name: str) -> bytes:
    body = {k: v for k, v in cfg.items() if k != "sig"}
    canon = jsoncodec.canonical(body)  # the bytes of json.dumps(sort_keys, ASCII, compact)
    return DOMAIN + project.encode("utf-8", "surrogateescape") + b"\0" + name.encode() + b"\0" + canon


def real_project(state: Path) -> str:
    """The project's real path: what a signature is bound to."""
    return os.path.realpath(Path(state).parent)


_BLOCK = 64  # SHA-256's block size
# The pads as 512-bit numbers: XOR on ints costs nothing to set up (a byte translation table
# built at import cost every Stop ~0.1 ms).
_IPAD = int.from_bytes(b"\x36" * _BLOCK, "big")
_OPAD = int.from_bytes(b"\x5c" * _BLOCK, "big")


def hmac_sha256(key: bytes, message: bytes) -> str:
    """HMAC-SHA256 of ``message`` under ``key``, as hex (RFC 2104)."""
    if len(key) > _BLOCK:
        key = _sha256(key).digest()
    k = int.from_bytes(key.ljust(_BLOCK, b"\0"), "big")
    inner = _sha256((k ^ _IPAD).to_bytes(_BLOCK, "big"))
    inner.update(message)
    outer = _sha256((k ^ _OPAD).to_bytes(_BLOCK, "big"))
    outer.update(inner.digest())
    return outer.hexdigest()


def signature(key: bytes, cfg: dict, state: Path, name: str) -> str:
    return hmac_sha256(key, _message(cfg, real_project(state), name))


def sign(cfg: dict, state: Path, name: str) -> dict:
    """``cfg`` with a fresh ``sig`` (making the key if needed)."""
    out = dict(cfg)
    out.pop("sig", None)
    out["sig"] = signature(ensure_key(), out, state, name)
    return out


def verify(cfg: dict, state: Path, name: str, key: bytes | None) -> str | None:
    """None when ``cfg`` was signed by this user's loopwright for this project and
    name; otherwise why not, in a few words."""
    sig = cfg.get("sig")
    if not isinstance(sig, str) or not sig:
        return "it carries no loopwright signature"
    if key is None:
        return "no loopwright key exists for this user, so no loop here can be one of yours"
    try:
        want = signature(key, cfg, state, name)
    except (TypeError, ValueError):
        return "it holds values that cannot be signed"
    if not compare_digest(want, sig):
        return "its signature does not match (written elsewhere, by someone else, or edited by hand)"
    return None


# --- loops that ended ------------------------------------------------------------------------
#
# A copy of a loop's directory taken while it ran and put back after it ended (a backup
# restored, a directory copied aside and back) still carries a valid signature: this user's
# loopwright signed it. So the end of every loop is also recorded beside the key, outside
# every project: one small file per loop, named by a hash of the project's real path, the
# loop's name and its id, holding the generation (loop.json's save counter, signed) at which
# it ended. An active loop.json whose generation is no higher is an older copy and is not
# trusted; a loop reopened on purpose (resume) is saved with a higher generation. On the Stop's
# path this is one failed open for a loop that never ended.

ENDED_DIRNAME = "ended"
ENDED_UNKNOWN = 1 << 62  # a record that cannot be read as a number: ended, at an unknown generation


def loop_identity(cfg: dict) -> str:
    """The loop's random id: ``loop_id`` (set at start and at adoption), else the older ``id``."""
    ident = cfg.get("loop_id") or cfg.get("id")
    return ident if isinstance(ident, str) else ""


def generation(cfg: dict) -> int:
    gen = cfg.get("generation")
    return gen if type(gen) is int and gen >= 0 else 0


def _ended_path(project: str, name: str, ident: str) -> str:
    parts = b"\0".join(s.encode("utf-8", "surrogateescape") for s in (project, name, ident))
    return os.path.join(str(key_path().parent), ENDED_DIRNAME, _sha256(parts).hexdigest()[:32])


def ended_generation(project: str, name: str, ident: str) -> int | None:
    """The generation at which this loop was recorded as ended; None when it never was."""
    try:
        fd = os.open(
            _ended_path(project, name, ident), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        )
    except FileNotFoundError:
        return None
    except OSError:  # a record that is there but cannot be opened still says "ended"
        return ENDED_UNKNOWN
    try:
        text = os.read(fd, 64).strip()
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else ENDED_UNKNOWN


def ended_earlier(cfg: dict, state: Path, name: str) -> str | None:
    """Why an active ``cfg`` is an older copy of a loop that has ended since, or None."""
    ended = ended_generation(real_project(state), name, loop_identity(cfg))
    gen = generation(cfg)
    if ended is None or gen > ended:
        return None
    when = f" at save {ended}" if ended != ENDED_UNKNOWN else ""
    return f"it ended or was cancelled{when}, and this copy of its loop.json is older (save {gen})"


def record_ended(cfg: dict, state: Path, name: str) -> None:
    """Remember that the loop of ``cfg`` (as saved, ended) ended at its generation: written
    atomically beside the key, never lowered. Best effort: the loop has ended either way."""
    project, ident, gen = real_project(state), loop_identity(cfg), generation(cfg)
    path = _ended_path(project, name, ident)
    prior = ended_generation(project, name, ident)
    if prior is not None and prior >= gen:
        return
    try:
        os.mkdir(os.path.dirname(path), 0o700)
    except FileExistsError:
        pass
    except OSError:
        return
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"%d\n" % gen)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
