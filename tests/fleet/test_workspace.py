"""A fleet loop's git workspace against real local bare repositories (file:// URLs): the
work branch, committing what the agent left, pushing under a lease so a worker that lost
its loop cannot overwrite the new owner's work, and the git hardening around untrusted
URLs and repositories."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import psutil
import pytest

import hostileurls
from loopwright.fleet.allow import Allow, Refused
from loopwright.fleet.workspace import PushRejected, Workspace, WorkspaceError, run_git

SEED_ID = ["-c", "user.name=Seeder", "-c", "user.email=seed@example.invalid"]


def git(*args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    out = subprocess.run(
        ["git", *SEED_ID, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.strip()


def make_remote(tmp_path: Path, name: str = "remote", branches=("main",), head: str = "main") -> str:
    """A bare repository with one commit on each branch; its file:// URL."""
    bare = tmp_path / f"{name}.git"
    git("init", "--quiet", "--bare", "--initial-branch", head, str(bare))
    seed = tmp_path / f"{name}-seed"
    git("init", "--quiet", "--initial-branch", branches[0], str(seed))
    for branch in branches:
        git("checkout", "--quiet", "-B", branch, cwd=seed)
        (seed / f"{branch}.txt").write_text(f"on {branch}\n")
        git("add", "--all", cwd=seed)
        git("commit", "--quiet", "-m", f"seed {branch}", cwd=seed)
        git("push", "--quiet", str(bare), f"{branch}:{branch}", cwd=seed)
    return f"file://{bare}"


def remote_commit(url: str, ref: str) -> str:
    return git("--git-dir", url[len("file://") :], "rev-parse", ref)


def remote_files(url: str, ref: str) -> list[str]:
    return git("--git-dir", url[len("file://") :], "ls-tree", "-r", "--name-only", ref).splitlines()


@pytest.fixture
def remote(tmp_path: Path) -> str:
    return make_remote(tmp_path)


def worker(tmp_path: Path, remote: str, who: str = "w1", name: str = "f-0001", **kw) -> Workspace:
    return Workspace(tmp_path / who / "workspaces", name, remote, **kw)


def test_clone_starts_the_work_branch_from_the_remote_head(tmp_path, remote):
    ws = worker(tmp_path, remote)
    start = ws.prepare()
    assert start == remote_commit(remote, "main")
    assert git("symbolic-ref", "HEAD", cwd=ws.dir) == "refs/heads/loopwright/f-0001"
    assert ws.remote_seen is None and ws.remote_tip() is None
    assert stat.S_IMODE(ws.dir.stat().st_mode) == 0o700
    assert "/.loopwright/" in (ws.dir / ".git" / "info" / "exclude").read_text().splitlines()
    assert (ws.dir / "main.txt").read_text() == "on main\n"
    assert not list(ws.root.glob(".clone+*")), "the temporary clone was renamed into place"


def test_a_named_base_branch_or_the_remote_head(tmp_path):
    url = make_remote(tmp_path, branches=("trunk", "dev"), head="trunk")
    assert worker(tmp_path, url, name="a").prepare() == remote_commit(url, "trunk")
    assert worker(tmp_path, url, name="b", base_branch="dev").prepare() == remote_commit(url, "dev")
    with pytest.raises(WorkspaceError, match="the remote has no branch 'nope'"):
        worker(tmp_path, url, name="c", base_branch="nope").prepare()


def test_commit_all_and_push(tmp_path, remote):
    ws = worker(tmp_path, remote)
    ws.prepare()
    assert ws.commit_all("nothing yet") is None
    (ws.dir / "new.txt").write_text("new\n")
    (ws.dir / "main.txt").write_text("changed\n")
    (ws.dir / "sub").mkdir()
    (ws.dir / "sub" / "deep.txt").write_text("deep\n")
    (ws.dir / ".loopwright").mkdir()
    (ws.dir / ".loopwright" / "loop.json").write_text("{}")
    sha = ws.commit_all("iteration 1\n\n#12 is fixed")
    assert sha == git("rev-parse", "HEAD", cwd=ws.dir)
    assert ws.commit_all("again") is None
    assert git("log", "-1", "--format=%B", cwd=ws.dir) == "iteration 1\n\n#12 is fixed"
    assert ws.push(None) == sha
    assert ws.remote_tip() == sha == remote_commit(remote, "loopwright/f-0001") == ws.remote_seen
    assert sorted(remote_files(remote, sha)) == ["main.txt", "new.txt", "sub/deep.txt"]
    assert remote_commit(remote, "main") != sha, "only the work branch moves"


def test_a_commit_that_carries_only_its_message_and_the_messages_since_a_commit(tmp_path, remote):
    """Each push carries its iteration's record (fleet/ledger.py), made even when the agent
    changed nothing; a takeover reads the messages after the last recorded commit, or the last
    ones when that commit is not an ancestor of the tip (the branch was rewritten)."""
    ws = worker(tmp_path, remote)
    start = ws.prepare()
    first = ws.commit_all("one\n\nLoopwright-Iteration: 1", allow_empty=True)
    second = ws.commit_all("two\n\nLoopwright-Iteration: 2", allow_empty=True)
    assert first != second != start and git("diff", "--stat", start, second, cwd=ws.dir) == ""
    assert ws.messages(first, second, 10) == (["two\n\nLoopwright-Iteration: 2\n"], True)
    assert ws.messages(second, second, 10) == ([], True)
    newest, ranged = ws.messages(None, second, 2)
    assert [m.split("\n")[0] for m in newest] == ["two", "one"] and not ranged
    elsewhere = "f" * 40  # a commit this clone does not have: as if the branch was rewritten
    assert ws.messages(elsewhere, second, 1) == (["two\n\nLoopwright-Iteration: 2\n"], False)
    with pytest.raises(ValueError):
        ws.messages("--all", second, 1)


def test_the_identity_is_loopwrights_unless_git_config_gives_one(tmp_path, remote, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-global"))
    monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(tmp_path / "no-system"))
    for key in ("AUTHOR", "COMMITTER"):
        for part in ("NAME", "EMAIL"):
            monkeypatch.delenv(f"GIT_{key}_{part}", raising=False)
    ws = worker(tmp_path, remote)
    ws.prepare()
    (ws.dir / "a").write_text("a")
    ws.commit_all("one")
    fmt = "%an <%ae> / %cn <%ce>"
    assert git("log", "-1", f"--format={fmt}", cwd=ws.dir) == (
        "loopwright worker <loopwright@localhost> / loopwright worker <loopwright@localhost>"
    )
    (tmp_path / "no-global").write_text("[user]\n\tname = Ada\n\temail = ada@example.invalid\n")
    (ws.dir / "b").write_text("b")
    ws.commit_all("two")
    assert (
        git("log", "-1", f"--format={fmt}", cwd=ws.dir)
        == "Ada <ada@example.invalid> / Ada <ada@example.invalid>"
    )


def test_another_worker_continues_from_the_pushed_tip(tmp_path, remote):
    first = worker(tmp_path, remote, "w1")
    first.prepare()
    (first.dir / "one.txt").write_text("1\n")
    pushed = first.push(None) if first.commit_all("one") else None
    assert pushed
    second = worker(tmp_path, remote, "w2")
    assert second.prepare() == pushed == second.remote_seen
    assert (second.dir / "one.txt").read_text() == "1\n"
    (second.dir / "two.txt").write_text("2\n")
    second.commit_all("two")
    tip = second.push(second.remote_seen)
    assert git("rev-list", "--count", f"{pushed}..{tip}", cwd=second.dir) == "1"
    assert sorted(remote_files(remote, "loopwright/f-0001")) == ["main.txt", "one.txt", "two.txt"]


def test_a_stale_worker_cannot_overwrite_the_new_owners_push(tmp_path, remote):
    first = worker(tmp_path, remote, "w1")
    first.prepare()
    (first.dir / "one.txt").write_text("1\n")
    first.commit_all("one")
    seen = first.push(None)
    second = worker(tmp_path, remote, "w2")  # the loop failed over while the first was away
    second.prepare()
    (second.dir / "two.txt").write_text("2\n")
    second.commit_all("two")
    theirs = second.push(second.remote_seen)
    (first.dir / "stale.txt").write_text("stale\n")  # the first worker comes back and goes on
    first.commit_all("stale")
    with pytest.raises(PushRejected) as err:
        first.push(seen)
    assert "rejected" in err.value.line and "\n" not in str(err.value)
    with pytest.raises(PushRejected):
        first.push(None)  # "the branch must not exist yet" is a lease too
    assert remote_commit(remote, "loopwright/f-0001") == theirs
    assert first.remote_tip() == theirs


def test_prepare_drops_what_was_not_pushed(tmp_path, remote):
    ws = worker(tmp_path, remote)
    ws.prepare()
    (ws.dir / "kept.txt").write_text("pushed\n")
    ws.commit_all("kept")
    pushed = ws.push(None)
    (ws.dir / "kept.txt").write_text("half an iteration\n")
    (ws.dir / "lost.txt").write_text("never committed\n")
    (ws.dir / ".loopwright").mkdir()
    (ws.dir / ".loopwright" / "state.json").write_text("{}")
    (ws.dir / "unpushed.txt").write_text("committed, not pushed\n")
    git("add", "unpushed.txt", cwd=ws.dir)
    git("commit", "--quiet", "--no-verify", "-m", "unpushed", cwd=ws.dir)
    assert ws.prepare() == pushed
    assert (ws.dir / "kept.txt").read_text() == "pushed\n"
    assert not (ws.dir / "lost.txt").exists() and not (ws.dir / "unpushed.txt").exists()
    assert (ws.dir / ".loopwright" / "state.json").exists(), "loopwright's own state stays"


def test_a_workspace_a_killed_git_left_broken_is_cloned_again(tmp_path, remote):
    ws = worker(tmp_path, remote)
    ws.prepare()
    (ws.dir / "a.txt").write_text("a\n")
    ws.commit_all("one")
    pushed = ws.push(None)
    (ws.dir / ".git" / "index.lock").write_text("")  # what a git killed mid-commit leaves
    with pytest.raises(WorkspaceError, match="index.lock"):
        ws.commit_all("blocked")
    assert ws.prepare() == pushed
    assert not (ws.dir / ".git" / "index.lock").exists()
    (ws.dir / "b.txt").write_text("b\n")
    assert ws.commit_all("two")
    assert ws.push(pushed)


def test_nothing_under_loopwright_is_ever_committed(tmp_path):
    # A repository that ships a .loopwright/ of its own: its files stay as shipped.
    url = make_remote(tmp_path)
    seed = tmp_path / "remote-seed"
    (seed / ".loopwright").mkdir()
    (seed / ".loopwright" / "shipped.json").write_text('{"v": 1}')
    git("add", "--force", ".loopwright", cwd=seed)
    git("commit", "--quiet", "-m", "ship state", cwd=seed)
    git("push", "--quiet", url, "main:main", cwd=seed)
    ws = worker(tmp_path, url)
    ws.prepare()
    (ws.dir / ".loopwright" / "shipped.json").write_text('{"v": 2}')
    (ws.dir / ".loopwright" / "loop.json").write_text("{}")
    (ws.dir / "work.txt").write_text("work\n")
    sha = ws.commit_all("work")
    ws.push(None)
    assert git("show", "--name-only", "--format=", sha, cwd=ws.dir).splitlines() == ["work.txt"]
    assert git("show", f"{sha}:.loopwright/shipped.json", cwd=ws.dir) == '{"v": 1}'
    (ws.dir / ".loopwright" / "only.txt").write_text("x")
    assert ws.commit_all("only state") is None


@pytest.fixture
def git_spy(tmp_path, monkeypatch) -> Path:
    """A `git` first on PATH that logs each call, then runs the real one."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True).stdout.strip()
    bindir = tmp_path / "spybin"
    bindir.mkdir()
    log = tmp_path / "git-calls.log"
    spy = bindir / "git"
    spy.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real}" "$@"\n')
    spy.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_a_refused_url_never_reaches_git(tmp_path, remote, git_spy):
    marker = tmp_path / "pwned"
    for url in (f"ext::sh -c touch% {marker}", f"-u touch {marker}", "ssh://-oProxyCommand=x/y", ""):
        with pytest.raises(Refused):
            worker(tmp_path, url)
    allow = Allow(["https://github.com/acme/*"])
    with pytest.raises(Refused, match="no --allow-repo pattern matches file://"):
        worker(tmp_path, remote, allow=allow)
    assert not git_spy.exists() and not marker.exists()
    # The spy does see git when a URL is allowed (so its silence above means something).
    worker(tmp_path, remote, allow=Allow([remote.rsplit("/", 1)[0] + "/*"])).prepare()
    assert "clone" in git_spy.read_text()


def test_git_itself_refuses_ext_urls(tmp_path):
    """Behind the allow-list, the flags every command carries refuse ext:: on their own."""
    marker = tmp_path / "pwned"
    url = f"ext::sh -c touch% {marker}"
    rc, _, err = run_git(["clone", "--", url, str(tmp_path / "c1")], tmp_path, timeout=120)
    assert rc != 0 and not marker.exists(), err
    # Without them the same clone runs the command: the check above can fail.
    subprocess.run(
        ["git", "-c", "protocol.ext.allow=always", "clone", "--", url, str(tmp_path / "c2")],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "GIT_ALLOW_PROTOCOL"},
    )
    assert marker.exists()


def plant_hooks(hooks: Path, marker: Path) -> None:
    hooks.mkdir(parents=True, exist_ok=True)
    for name in (
        "pre-commit",
        "commit-msg",
        "post-commit",
        "pre-push",
        "post-checkout",
        "reference-transaction",
    ):
        (hooks / name).write_text(f'#!/bin/sh\necho {name} >> "{marker}"\n')
        (hooks / name).chmod(0o755)


def test_hooks_and_fsmonitor_in_the_workspace_never_run(tmp_path, remote, monkeypatch):
    marker = tmp_path / "ran"
    # Hooks from a template directory are copied into every clone git makes.
    template = tmp_path / "template"
    plant_hooks(template / "hooks", marker)
    monkeypatch.setenv("GIT_TEMPLATE_DIR", str(template))
    ws = worker(tmp_path, remote)
    ws.prepare()
    assert (ws.dir / ".git" / "hooks" / "pre-commit").exists(), "the template's hooks are in the clone"
    plant_hooks(ws.dir / ".git" / "hooks", marker)  # as the agent, or a prompt injected into it, might
    monitor = tmp_path / "fsmonitor"
    monitor.write_text(f'#!/bin/sh\necho fsmonitor >> "{marker}"\n')
    monitor.chmod(0o755)
    git("config", "core.fsmonitor", str(monitor), cwd=ws.dir)
    (ws.dir / "a.txt").write_text("a\n")
    ws.commit_all("one")
    ws.push(None)
    ws.prepare()
    ws.remote_tip()
    assert not marker.exists(), marker.read_text()
    # The same hooks do run for plain git in that directory: the check above can fail.
    git("commit", "--quiet", "--allow-empty", "-m", "plain", cwd=ws.dir)
    assert "pre-commit" in marker.read_text()


def test_what_the_agent_writes_into_git_config_never_runs_in_the_workers_git(tmp_path, remote):
    """A filter driver, an ssh command, a credential helper, an include and a commondir written
    into the clone's .git (as an agent, or a prompt injected into it, might): the worker's git
    runs none of them, the config is put back as it was cloned, and the worker is told."""
    marker = tmp_path / "ran"
    ws = worker(tmp_path, remote)
    told: list[str] = []
    ws.on_tamper = told.append
    ws.prepare()
    cloned = (ws.dir / ".git" / "config").read_bytes()
    run = tmp_path / "evil.sh"  # a filter passes what it reads through; it also leaves a mark
    run.write_text(f'#!/bin/sh\necho ran >> "{marker}"\ncat\n')
    run.chmod(0o755)
    elsewhere = tmp_path / "elsewhere.cfg"
    elsewhere.write_text(f'[filter "x"]\n\tclean = {run}\n')
    with open(ws.dir / ".git" / "config", "a") as cfg:
        cfg.write(
            f'[filter "evil"]\n\tclean = {run}\n\tsmudge = {run}\n[core]\n\tsshCommand = {run}\n'
            f"[credential]\n\thelper = !{run}\n[include]\n\tpath = {elsewhere}\n"
        )
    (ws.dir / ".gitattributes").write_text("* filter=evil\n*.txt filter=x\n")
    (ws.dir / "a.txt").write_text("a\n")
    ws.commit_all("one")
    ws.push(None)
    assert not marker.exists(), marker.read_text()
    assert (ws.dir / ".git" / "config").read_bytes() == cloned
    assert told == ["put back .git/config as the worker cloned it"]
    # Plain git in that directory does run the filter: the check above can fail.
    (ws.dir / ".git" / "config").write_text(cloned.decode() + f'[filter "evil"]\n\tclean = {run}\n')
    (ws.dir / "b.txt").write_text("b\n")
    git("add", "b.txt", cwd=ws.dir)
    assert marker.read_text().startswith("ran")
    marker.unlink()
    common = tmp_path / "common"
    (common / "objects").mkdir(parents=True)
    (common / "config").write_text(f'[filter "evil"]\n\tclean = {run}\n')
    (ws.dir / ".git" / "commondir").write_text(str(common))
    (ws.dir / "c.txt").write_text("c\n")
    ws.commit_all("two")
    assert not marker.exists() and not (ws.dir / ".git" / "commondir").exists()
    assert told[1:] == ["removed .git/commondir; put back .git/config as the worker cloned it"]


def test_a_git_the_agent_replaced_ends_the_workspace_and_it_is_cloned_again(tmp_path, remote):
    ws = worker(tmp_path, remote)
    ws.prepare()
    fake = tmp_path / "fake-git"
    subprocess.run(["git", "init", "-q", str(fake)], check=True)
    real = ws.dir / ".git"
    os.rename(real, tmp_path / "moved-git")
    (ws.dir / ".git").write_text(f"gitdir: {fake / '.git'}\n")  # git would follow it
    with pytest.raises(WorkspaceError, match="is no longer a directory"):
        ws.commit_all("one")
    again = worker(tmp_path, remote)
    assert again.prepare() == remote_commit(remote, "main")  # cloned afresh
    assert (again.dir / ".git").is_dir()


def test_pushes_and_fetches_go_to_the_checked_url_only(tmp_path, remote):
    """An agent that re-points the workspace's remote sends nothing elsewhere."""
    other = make_remote(tmp_path, name="elsewhere")
    ws = worker(tmp_path, remote)
    ws.prepare()
    git("config", "remote.origin.pushurl", other, cwd=ws.dir)
    (ws.dir / "a.txt").write_text("a\n")
    ws.commit_all("one")
    sha = ws.push(None)
    assert remote_commit(remote, "loopwright/f-0001") == sha
    with pytest.raises(subprocess.CalledProcessError):
        remote_commit(other, "loopwright/f-0001")
    git("config", "remote.origin.url", other, cwd=ws.dir)
    assert ws.prepare() == sha, "a workspace cloned from elsewhere is cloned again"
    assert git("config", "remote.origin.url", cwd=ws.dir) == remote[len("file://") :]  # its real path


def test_names_and_leases_are_checked(tmp_path, remote):
    for name in ("../up", "-x", "a/b", ".hidden", "x.lock", "", "a..b"):
        with pytest.raises(ValueError):
            worker(tmp_path, remote, name=name)
    for base in ("-x", "a..b", "a b", "HEAD", "x/", "a//b", "@{1}"):
        with pytest.raises(ValueError):
            worker(tmp_path, remote, base_branch=base)
    ws = worker(tmp_path, remote)
    ws.prepare()
    with pytest.raises(ValueError):
        ws.push("HEAD")


@pytest.mark.parametrize("scheme", ["git", "http"])
def test_a_remote_that_never_answers_is_bounded(tmp_path, scheme):
    with socket.socket() as server:  # accepts the connection, never speaks
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        url = f"{scheme}://127.0.0.1:{server.getsockname()[1]}/repo"
        ws = worker(tmp_path, url, timeout=3)
        with pytest.raises(WorkspaceError, match="git clone took longer than 3 s"):
            ws.prepare()
        # The whole process group went: git-remote-http, a child of git clone, too.
        left = [p for p in psutil.process_iter(["cmdline"]) if url in " ".join(p.info["cmdline"] or ())]
        assert not left
    assert not ws.dir.exists() and not list(ws.root.glob(".clone+*"))


def test_errors_are_one_line_without_credentials(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ws = worker(tmp_path, f"https://x-token:s3cret@127.0.0.1:{port}/acme/repo.git", timeout=60)
    with pytest.raises(WorkspaceError) as err:
        ws.prepare()
    message = str(err.value)
    assert message.startswith("git clone failed: ") and "\n" not in message
    assert "s3cret" not in message


@pytest.fixture
def redirect():
    """An allowed local HTTP server answering 302 to a listener that must see nothing."""
    target = hostileurls.Listener()
    server = hostileurls.Redirector(target.port)
    yield server, target
    server.close()
    target.close()


def test_no_git_command_follows_a_redirect_whatever_the_config_says(tmp_path, redirect, monkeypatch):
    server, target = redirect
    url = f"http://127.0.0.1:{server.port}/acme/x.git"
    # The user's global config and the workspace's own .git/config both ask for redirects, for
    # every URL and for this one (a URL-specific setting beats a plain one from any file).
    on = "[http]\n\tfollowRedirects = true\n"
    for key in (url, url.removesuffix(".git"), url + "/", f"http://127.0.0.1:{server.port}"):
        on += f'[http "{key}"]\n\tfollowRedirects = true\n'
    (tmp_path / "global").write_text(on)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global"))
    ws = worker(tmp_path, url, allow=Allow([f"http://127.0.0.1:{server.port}/*"]))
    with pytest.raises(WorkspaceError, match="302"):
        ws.prepare()  # the clone
    git("init", "--quiet", str(ws.dir))
    (ws.dir / ".git" / "config").write_text((ws.dir / ".git" / "config").read_text() + on)
    git("config", "remote.origin.url", url, cwd=ws.dir)
    ws.pristine.write_bytes((ws.dir / ".git" / "config").read_bytes())  # as if cloned so
    with pytest.raises(WorkspaceError, match="302"):
        ws.prepare()  # a fetch in the workspace, which reads its .git/config
    with pytest.raises(WorkspaceError, match="302"):
        ws.remote_tip()
    git("commit", "--quiet", "--allow-empty", "-m", "x", cwd=ws.dir)
    with pytest.raises(WorkspaceError, match="302"):
        ws.push(None)
    assert server.requests >= 4 and target.connections == 0


def test_a_symlinked_repository_is_cloned_from_the_directory_that_was_matched(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    real = make_remote(allowed, name="real")[len("file://") :]
    other = make_remote(tmp_path, name="other")[len("file://") :]
    (allowed / "link.git").symlink_to(real)
    ws = worker(tmp_path, f"file://{allowed}/link.git", allow=Allow([f"file://{allowed}/*"]))
    assert ws.url == real
    # Re-pointed between the match and the clone: git still reads the directory matched.
    (allowed / "link.git").unlink()
    (allowed / "link.git").symlink_to(other)
    assert ws.prepare() == git("--git-dir", real, "rev-parse", "main")
    assert git("config", "remote.origin.url", cwd=ws.dir) == real
    with pytest.raises(Refused, match=f"no --allow-repo pattern matches file://{tmp_path}/other"):
        worker(tmp_path, f"{allowed}/link.git", name="f-0002", allow=Allow([f"file://{allowed}/*"]))
