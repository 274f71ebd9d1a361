"""A fleet loop's git workspace: a private clone of the loop's repository on the branch
``loopwright/<loop>``, committed and pushed after every iteration.

The repository, its URL and the branch names come from a shared registry row, so nothing in
them is trusted: the URL must pass the worker's allow-list before git sees it; every git
command runs without a shell, with ``--`` before values it was given, with hooks, fsmonitor
and the ``ext::`` transport off, no HTTP redirect followed, no terminal prompt and a time
bound; fetch, push and ls-remote name the checked URL itself (a local repository: the real
directory that was matched), never a remote the agent could have re-pointed in
``.git/config``. A push carries a lease on the tip this worker last saw, so a worker that
lost its loop to another cannot overwrite what the new owner pushed.

The agent works in the clone, so its ``.git`` is the agent's to write too: a ``core.sshCommand``,
a ``credential.helper``, a filter driver or a ``url.*.insteadOf`` in ``.git/config``, or a
``commondir`` pointing git at another config, would have the worker's own git run a command or
reach another host, outside the permission mode the worker gave Claude Code. So the worker keeps
the config its clone was made with outside the clone (``root/.config+<name>``) and, before each
git command it runs there, puts it back if it changed and removes a ``commondir``; a ``.git``
that is no longer a directory ends the workspace (it is cloned afresh). What was undone is
reported through ``on_tamper``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from loopwright.fleet.allow import Allow, git_url

# `-c` settings on every command; the command line wins over every config file.
GIT_CONFIG = (
    "protocol.ext.allow=never",
    "core.hooksPath=/dev/null",  # a hook in .git/hooks (planted by anyone) never runs
    "core.fsmonitor=false",  # nor a fsmonitor command written into .git/config
    "fetch.recurseSubmodules=false",
    "submodule.recurse=false",
    # An allowed host answering 302 would send the clone, and the push, to another host.
    "http.followRedirects=false",
)
# Transports git may use at all (GIT_ALLOW_PROTOCOL overrides protocol.*.allow; submodules too).
PROTOCOLS = ("file", "git", "http", "https", "ssh")
# Variables that would point git at another repository or object store than the workspace's.
REDIRECTS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)
IDENTITY = ("loopwright worker", "loopwright@localhost")
EXCLUDE = "/.loopwright/"
TIMEOUT = 600.0
TRACKING = "refs/remotes/origin/"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")
_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}\Z")
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")


class WorkspaceError(RuntimeError):
    """A workspace step failed; the message is one line, with no credentials."""


class PushRejected(WorkspaceError):
    """The remote refused the push (another worker pushed since); ``line`` is git's."""

    def __init__(self, line: str):
        super().__init__(f"push rejected: {line}")
        self.line = line


def _redact(text: str) -> str:
    return re.sub(r"://[^/\s@]*@", "://***@", text)


def _last_line(text: str) -> str:
    """git's own complaint (its last fatal: or error: line, else its last line), one line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    said = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith(("fatal:", "error:"))]
    line = said[-1] if said else lines[-1] if lines else ""
    return _redact(line)[:300]


def _branch_ok(name: str) -> bool:
    # git check-ref-format's rules that a regex can state, minus what is legal but pointless here.
    return bool(
        _BRANCH.match(name)
        and ".." not in name
        and "//" not in name
        and "/." not in name
        and not name.endswith(("/", ".", ".lock"))
        and name != "HEAD"
    )


def git_env(base: dict | None = None, url: str | None = None) -> dict:
    """The environment git runs in: no prompt, only plain transports, and none of the
    variables that would aim it at another repository; for an http(s) ``url``, redirects off
    for that URL too (see _no_redirects)."""
    env = dict(os.environ if base is None else base)
    for key in REDIRECTS:
        env.pop(key, None)
    theirs = env.get("GIT_ALLOW_PROTOCOL")
    allowed = [p for p in theirs.split(":") if p in PROTOCOLS] if theirs else list(PROTOCOLS)
    env["GIT_ALLOW_PROTOCOL"] = ":".join(allowed)
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    if url is not None and url.startswith(("https://", "http://")):
        _no_redirects(env, url)
    return env


def _no_redirects(env: dict, url: str) -> None:
    """``http.<url>.followRedirects=false`` as command-line config. A URL-specific setting
    beats the plain ``-c http.followRedirects=false`` whatever file it is in (a repository's
    .git/config, the user's global config); among equally specific ones the last read wins,
    and command-line config is read after every file. Given through GIT_CONFIG_COUNT (the
    command line's scope too), where a key is never split at an '=' the URL may hold, after
    any entries the environment had."""
    count = env.get("GIT_CONFIG_COUNT", "")
    n = int(count) if count.isdigit() else 0
    for key in dict.fromkeys((f"http.{url}.followRedirects", f"http.{url.rstrip('/')}/.followRedirects")):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, "false"
        n += 1
    env["GIT_CONFIG_COUNT"] = str(n)


def run_git(args: list[str], cwd: Path, *, timeout: float, input: str | None = None, env: dict | None = None):
    """(returncode, stdout, stderr) of ``git <GIT_CONFIG> args``. In its own session (no
    terminal for ssh to prompt on; the whole group is killed at the time bound)."""
    cmd = ["git"]
    for setting in GIT_CONFIG:
        cmd += ["-c", setting]
    cmd += args
    proc = subprocess.Popen(
        cmd,
        cwd=str(cwd),
        env=env or git_env(),
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise WorkspaceError(f"git {args[0]} took longer than {timeout:.0f} s") from None
    return proc.returncode, out, err


class Workspace:
    """``root/<loop_name>``, a clone of ``repo`` on ``loopwright/<loop_name>``.

    Refused (from loopwright.fleet.allow) at construction for a URL the allow-list, or
    without one the shape rules, refuse: such a URL never reaches git. ``url`` is what git is
    given: the URL, or for a local repository the real directory the allow-list matched."""

    def __init__(
        self,
        root: str | Path,
        loop_name: str,
        repo: str,
        base_branch: str | None = None,
        *,
        allow: Allow | None = None,
        timeout: float = TIMEOUT,
    ):
        self.url = allow.resolve(repo) if allow is not None else git_url(repo)
        if not (_NAME.match(loop_name) and ".." not in loop_name and not loop_name.endswith(".lock")):
            raise ValueError(f"loop name {loop_name!r} is not usable as a directory and branch name")
        if base_branch is not None and not _branch_ok(base_branch):
            raise ValueError(f"base branch {base_branch!r} is not a plain branch name")
        self.root = Path(root)
        self.name = loop_name
        self.repo = repo
        self.base_branch = base_branch
        self.timeout = timeout
        self.dir = self.root / loop_name
        self.branch = f"loopwright/{loop_name}"
        # The work branch's tip on the remote when this worker last looked (None: not there).
        self.remote_seen: str | None = None
        self.env = git_env(url=self.url)
        self.pristine = self.root / f".config+{loop_name}"  # the clone's own .git/config, kept here
        self.on_tamper = None  # called with what was undone in .git (one line)

    # -- git --------------------------------------------------------------------------------

    def _guard(self) -> None:
        """Before git runs in the clone: its .git a directory, its config the one it was cloned
        with, no commondir (see the module's docstring)."""
        git = self.dir / ".git"
        if not git.is_dir() or git.is_symlink():
            raise WorkspaceError("the clone's .git is no longer a directory (the agent replaced it)")
        undone = []
        common = git / "commondir"
        if common.exists() or common.is_symlink():
            common.unlink()
            undone.append("removed .git/commondir")
        config, kept = git / "config", self.pristine.read_bytes()
        if config.is_symlink() or not config.is_file() or config.read_bytes() != kept:
            tmp = git / ".config.loopwright"
            tmp.unlink(missing_ok=True)
            tmp.write_bytes(kept)
            os.replace(tmp, config)
            undone.append("put back .git/config as the worker cloned it")
        if undone and self.on_tamper is not None:
            self.on_tamper("; ".join(undone))

    def _git(self, *args: str, cwd: Path | None = None, input: str | None = None, env: dict | None = None):
        env = env or self.env
        if cwd is None:
            self._guard()
        rc, out, err = run_git(list(args), cwd or self.dir, timeout=self.timeout, input=input, env=env)
        if rc != 0:
            raise WorkspaceError(f"git {args[0]} failed: {_last_line(err) or f'exit code {rc}'}")
        return out

    def _ok(self, *args: str) -> tuple[int, str]:
        self._guard()
        rc, out, _ = run_git(list(args), self.dir, timeout=self.timeout, env=self.env)
        return rc, out.strip()

    def _commit_of(self, ref: str) -> str | None:
        rc, out = self._ok("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        return out if rc == 0 and _SHA.match(out) else None

    def head(self) -> str:
        sha = self._commit_of("HEAD")
        if sha is None:
            raise WorkspaceError("the workspace has no commit checked out")
        return sha

    # -- prepare ----------------------------------------------------------------------------

    def prepare(self) -> str:
        """Clone (or fetch into) the workspace and check out the work branch: at the remote's
        tip when the remote has it (a failover continues from what was pushed), else new from
        the base branch (default: the remote's HEAD). Leftovers of an iteration that was not
        committed are dropped. Returns the commit the loop starts from."""
        if not self.root.is_dir():
            self.root.mkdir(parents=True, mode=0o700)
        self._drop_stale_clones()
        if self._reusable():
            self._git("fetch", "--prune", "--quiet", "--", self.url, f"+refs/heads/*:{TRACKING}*")
            start = self._start_commit()
            try:
                return self._check_out(start)
            except WorkspaceError:
                # Left broken by a git that was killed (a stale index.lock, say): a workspace
                # is only a cache of the remote, so it is cloned afresh.
                self._remove()
        self._clone()
        return self._check_out(self._start_commit())

    def _start_commit(self) -> str:
        self.remote_seen = self._commit_of(f"{TRACKING}{self.branch}")
        return self.remote_seen or self._base_commit()

    def _check_out(self, start: str) -> str:
        os.chmod(self.dir, 0o700)
        self._exclude()
        self._git("checkout", "--quiet", "--force", "--no-track", "-B", self.branch, start, "--")
        # Not -x: ignored build caches stay, and so does .loopwright/ (in info/exclude).
        self._git("clean", "-fdq")
        self._state_dir_usable()
        return self.head()

    def _state_dir_usable(self) -> None:
        """A loop keeps its state in .loopwright/ of the clone: a branch that commits that name
        as a symbolic link (pointing anywhere) or a file cannot be run."""
        state = self.dir / ".loopwright"
        if state.is_symlink() or (state.exists() and not state.is_dir()):
            what = "a symbolic link" if state.is_symlink() else "a file"
            raise WorkspaceError(
                f"the branch commits .loopwright as {what}; loopwright keeps a loop's state in that "
                "directory: remove it from the branch"
            )

    def _drop_stale_clones(self) -> None:
        for stale in self.root.glob(f".clone+{self.name}+*"):
            shutil.rmtree(stale, ignore_errors=True)

    def _reusable(self) -> bool:
        """Whether the directory is a clone of this repository (else it is cloned afresh:
        the remote holds the work, a workspace is only a cache)."""
        if self.dir.is_symlink() or (self.dir.exists() and not (self.dir / ".git").is_dir()):
            self._remove()
            return False
        if not self.dir.exists():
            return False
        if not self.pristine.is_file():  # cloned by an older worker, or its copy lost: clone again
            self._remove()
            return False
        try:
            rc, url = self._ok("config", "--get", "remote.origin.url")  # guarded first, as every git here
        except WorkspaceError:  # its .git is no longer a directory
            self._remove()
            return False
        if rc == 0 and url == self.url:
            return True
        self._remove()
        return False

    def _remove(self) -> None:
        if self.dir.is_symlink() or self.dir.is_file():
            self.dir.unlink()
        else:
            shutil.rmtree(self.dir)

    def _clone(self) -> None:
        # Into a private temporary directory renamed into place: a workspace that exists is whole.
        tmp = Path(tempfile.mkdtemp(prefix=f".clone+{self.name}+", dir=self.root))
        try:
            # --no-local: a local path is copied through git's transport, never hard-linked.
            args = ("clone", "--quiet", "--no-checkout", "--no-local", "--", self.url, str(tmp))
            self._git(*args, cwd=self.root)
            shutil.copyfile(tmp / ".git" / "config", self.pristine)  # before the agent can touch it
            os.rename(tmp, self.dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _exclude(self) -> None:
        info = self.dir / ".git" / "info"
        info.mkdir(exist_ok=True)
        exclude = info / "exclude"
        text = exclude.read_text() if exclude.is_file() else ""
        if EXCLUDE not in text.splitlines():
            exclude.write_text(text + ("" if not text or text.endswith("\n") else "\n") + EXCLUDE + "\n")

    def _base_commit(self) -> str:
        base = self.base_branch or self._remote_head()
        sha = self._commit_of(f"{TRACKING}{base}")
        if sha is None:
            raise WorkspaceError(f"the remote has no branch {base!r} to start {self.branch} from")
        return sha

    def _remote_head(self) -> str:
        out = self._git("ls-remote", "--symref", "--", self.url, "HEAD")
        for line in out.splitlines():
            target, _, name = line.partition("\t")
            if name == "HEAD" and target.startswith("ref: refs/heads/"):
                branch = target[len("ref: refs/heads/") :]
                if _branch_ok(branch):
                    return branch
        raise WorkspaceError("the remote's HEAD names no branch (an empty repository?): give a base branch")

    # -- commit and push --------------------------------------------------------------------

    def commit_all(self, message: str, allow_empty: bool = False) -> str | None:
        """Commit everything the agent left, new files included, except .loopwright/; None
        when there was nothing to commit (unless ``allow_empty``: a commit that only carries
        its message). The identity is git config's, else loopwright's."""
        # info/exclude keeps .loopwright/ out of `add --all` (an exclude pathspec naming an
        # ignored path makes add fail); the reset unstages its files a repository tracks.
        self._git("add", "--all")
        self._git("reset", "--quiet", "--", ".loopwright")
        rc, _ = self._ok("diff", "--cached", "--quiet")
        if rc == 0 and not allow_empty:
            return None
        env = dict(self.env)
        for key, value in (("name", IDENTITY[0]), ("email", IDENTITY[1])):
            if self._ok("config", "--get", f"user.{key}")[0] != 0:
                env[f"GIT_AUTHOR_{key.upper()}"] = env[f"GIT_COMMITTER_{key.upper()}"] = value
        # whitespace, not strip: a line such as "#12 fixed" is part of the message.
        text = message.strip() or "loopwright: iteration"
        empty = ("--allow-empty",) if rc == 0 else ()
        args = ("commit", "--quiet", "--no-verify", *empty, "--cleanup=whitespace", "-F", "-")
        self._git(*args, input=text, env=env)
        return self.head()

    def messages(self, since: str | None, tip: str, limit: int) -> tuple[list[str], bool]:
        """The messages of the commits after ``since`` up to ``tip``, newest first, at most
        ``limit``, and True; of the last ``limit`` commits up to ``tip`` and False when ``since``
        is None or not an ancestor of ``tip`` here (the branch was rewritten)."""
        for commit in (since, tip):
            if commit is not None and not _SHA.match(commit):
                raise ValueError(f"{commit!r} is not a commit id")
        known = since is not None and self._ok("merge-base", "--is-ancestor", since, tip)[0] == 0
        span = f"{since}..{tip}" if known else tip
        out = self._git("log", "-z", "--format=%B", f"--max-count={int(limit)}", span, "--")
        return [m for m in out.split("\0") if m.strip()], known

    def push(self, expected: str | None) -> str:
        """Push HEAD to the work branch if the remote's tip is still ``expected`` (None: the
        branch must not exist yet); returns the pushed commit. PushRejected otherwise."""
        if expected is not None and not _SHA.match(expected):
            raise ValueError(f"expected tip {expected!r} is not a commit id")
        sha = self.head()
        ref = f"refs/heads/{self.branch}"
        lease = f"--force-with-lease={ref}:{expected or ''}"
        args = ["push", "--porcelain", "--no-verify", lease, "--", self.url, f"{sha}:{ref}"]
        self._guard()
        rc, out, err = run_git(args, self.dir, timeout=self.timeout, env=self.env)
        for line in out.splitlines():
            if line.startswith("!\t"):
                raise PushRejected(_redact(" ".join(line[2:].split())))
        if rc != 0:
            raise WorkspaceError(f"git push failed: {_last_line(err) or f'exit code {rc}'}")
        self.remote_seen = sha
        return sha

    def remote_tip(self) -> str | None:
        """The work branch's commit on the remote now, or None when it has none."""
        ref = f"refs/heads/{self.branch}"
        out = self._git("ls-remote", "--", self.url, ref)
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            if name == ref and _SHA.match(sha):
                return sha
        return None
