"""Task-module mechanics against real git repositories: init (branch or
worktree), recorded transitions and their commits, dependencies, merge with
conflicts and verification, report from history, cancel, annotations."""

import json
import re
import subprocess

import pytest

from conftest import REPO, lw_env
from loopwright.modes.task import signals, taskdir
from loopwright.modes.task.ops.annotate import annotate
from loopwright.modes.task.ops.cancel import cancel
from loopwright.modes.task.ops.commit import commit_work
from loopwright.modes.task.ops.init import init
from loopwright.modes.task.ops.merge import merge
from loopwright.modes.task.ops.report import report
from loopwright.modes.task.ops.status import status
from loopwright.modes.task.ops.taskmodule import TaskError, locate
from loopwright.modes.task.ops.transition import apply


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "T")
    (r / "app.txt").write_text("line one\nline two\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "base")
    return r


def subjects(repo, ref="--all"):
    return git(repo, "log", ref, "--format=%s").splitlines()


def drive_to_accept(repo, name="demo"):
    apply(repo, name, "plan")
    apply(repo, name, "check", checkpoint="post-plan", result="PASS")
    apply(repo, name, "exec")
    (repo / "app.txt").write_text("line one\nline two\nfeature\n")
    commit_work(repo, name, "feat", "add feature line")
    apply(repo, name, "exec", result="(done)")
    apply(repo, name, "check", checkpoint="post-exec", result="ACCEPT")


def test_init_creates_the_module_branch_and_convention_commit(repo):
    res = init(repo, "demo", title="Demo", tags=["api"])
    d = repo / "TASK" / "demo"
    assert res["branch"] == "task/demo" and git(repo, "branch", "--show-current").strip() == "task/demo"
    meta = taskdir.read_index(d).meta
    assert (meta["status"], meta["title"], meta["tags"], meta["branch"], meta["worktree"]) == (
        "draft",
        "Demo",
        ["api"],
        "task/demo",
        "",
    )
    for sub in (".analysis", ".test", ".bugfix", ".notes"):
        assert (d / sub).is_dir()
    assert "## Objective" in (d / ".target.md").read_text()
    assert not taskdir.target_has_content(d)
    assert all(line in (repo / ".gitignore").read_text() for line in taskdir.GITIGNORE_LINES)
    assert "| [demo](demo/.index.md) | Demo | draft |" in (repo / "TASK" / ".index.md").read_text()
    assert subjects(repo, "HEAD")[0] == "-- ai-cli-task(demo):init initialize task module"
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.parametrize("name, message", [("../x", "invalid module name"), ("a b", "invalid module name")])
def test_init_rejects_bad_names(repo, name, message):
    with pytest.raises(TaskError, match=message):
        init(repo, name)


def test_init_needs_git_with_a_commit(tmp_path):
    with pytest.raises(TaskError, match="not a git repository"):
        init(tmp_path, "demo")
    git(tmp_path, "init", "-q")
    with pytest.raises(TaskError, match="no commit yet"):
        init(tmp_path, "demo")


def test_init_twice_is_refused(repo):
    init(repo, "demo")
    with pytest.raises(TaskError, match="already exists"):
        init(repo, "demo")


def test_full_lifecycle_merge_and_report_from_history(repo):
    init(repo, "demo")
    drive_to_accept(repo)
    res = merge(repo, "demo")
    assert res["result"] == "success" and "branch task/demo" in res["cleaned"]
    assert git(repo, "branch", "--show-current").strip() == "main"
    assert "task/demo" not in git(repo, "branch")
    assert taskdir.read_index(repo / "TASK" / "demo").meta["status"] == "complete"
    assert "feature" in (repo / "app.txt").read_text()
    rep = report(repo, "demo")
    text = (repo / "TASK" / "demo" / ".report.md").read_text()
    assert "**Status**: complete" in text and "| feat | add feature line |" in text
    assert "## Verification" in text and "## Lessons" in text
    convention = [s for s in subjects(repo) if s != "base"]
    assert convention and all(s.startswith("-- ai-cli-task(demo):") for s in convention)
    kinds = [s.split(":")[1].split()[0] for s in reversed(convention)]
    assert kinds == ["init", "plan", "check", "exec", "feat", "exec", "check", "merge", "merge", "report"]
    assert rep["commits"] == 9  # the history was found after the branch was deleted
    assert "-- ai-cli-task(demo):check post-plan PASS → review" in convention


def test_exec_and_merge_enforce_dependencies(repo):
    init(repo, "base-work")
    git(repo, "checkout", "-q", "main")
    init(repo, "demo")
    idx = taskdir.read_index(repo / "TASK" / "demo")
    idx.meta["depends_on"] = ["base-work"]
    taskdir.write_index(repo / "TASK" / "demo", idx)
    git(repo, "commit", "-qam", "deps")
    apply(repo, "demo", "plan")
    apply(repo, "demo", "check", checkpoint="post-plan", result="PASS")
    with pytest.raises(TaskError, match=r"dependencies complete first; not complete: base-work \(missing\)"):
        apply(repo, "demo", "exec")
    assert status(repo, "demo")["blocking_dependencies"] == ["base-work (missing)"]


def test_merge_needs_an_accept_after_the_last_exec(repo):
    init(repo, "demo")
    drive_to_accept(repo)
    apply(repo, "demo", "exec", result="(done)")  # more work after the verdict
    with pytest.raises(TaskError, match="needs an ACCEPT"):
        merge(repo, "demo")


def test_merge_refused_outside_executing(repo):
    init(repo, "demo")
    with pytest.raises(TaskError, match="merge is not allowed while the task is draft"):
        merge(repo, "demo")


def test_merge_conflict_then_resolution_with_verification(repo):
    init(repo, "demo")
    drive_to_accept(repo)
    git(repo, "checkout", "-q", "main")
    (repo / "app.txt").write_text("line one\nline two\nsomething else\n")
    git(repo, "commit", "-qam", "main moved on")
    git(repo, "checkout", "-q", "task/demo")
    res = merge(repo, "demo")
    assert res["result"] == "conflict" and res["conflicts"] == ["app.txt"]
    with pytest.raises(TaskError, match="still conflicted: app.txt"):
        merge(repo, "demo", cont=True)
    (repo / "app.txt").write_text("line one\nline two\nsomething else\nfeature\n")
    git(repo, "add", "app.txt")
    # A verification that fails undoes the merge and counts an attempt.
    res = merge(repo, "demo", cont=True, verify="grep -q nothing-like-this app.txt")
    assert res["result"] == "conflict" and res["attempts"] == 1
    assert (
        taskdir.read_index(repo / "TASK" / "demo").meta["status"] == "executing"
        if (repo / "TASK/demo/.index.md").exists()
        else True
    )
    git(repo, "checkout", "-q", "task/demo")
    res = merge(repo, "demo")
    assert res["result"] == "conflict"
    (repo / "app.txt").write_text("line one\nline two\nsomething else\nfeature\n")
    git(repo, "add", "app.txt")
    res = merge(repo, "demo", cont=True, verify="grep -q feature app.txt")
    assert res["result"] == "success"
    assert "-- ai-cli-task(demo):merge resolve merge conflict" in subjects(repo, "main")


def test_merge_gives_up_after_three_failed_verifications(repo):
    init(repo, "demo")
    drive_to_accept(repo)
    for attempt in range(1, 4):
        git(repo, "checkout", "-q", "task/demo")
        res = merge(repo, "demo", verify="false")
        assert res["result"] == "conflict" and res["attempts"] == attempt
    assert res.get("gave_up")
    git(repo, "checkout", "-q", "task/demo")
    assert taskdir.read_index(repo / "TASK" / "demo").meta["status"] == "executing"


def test_cancel_snapshots_uncommitted_work_and_can_clean_up(repo):
    init(repo, "demo")
    (repo / "wip.txt").write_text("unfinished")
    res = cancel(repo, "demo", "changed plans")
    assert res["snapshot"] and res["to"] == "cancelled"
    assert subjects(repo, "task/demo")[:2] == [
        "-- ai-cli-task(demo):cancel changed plans",
        "-- ai-cli-task(demo):cancel snapshot uncommitted changes",
    ]
    assert json.loads((repo / "TASK/demo/.auto-stop").read_text())["reason"] == "user_stop"
    again = cancel(repo, "demo")
    assert again["noop"]


def test_cancel_with_cleanup_removes_branch_and_worktree(repo):
    init(repo, "wt", worktree=True)
    wt = repo / ".worktrees" / "task-wt"
    assert (wt / "TASK" / "wt" / ".index.md").exists() and not (repo / "TASK" / "wt").exists()
    assert git(repo, "branch", "--show-current").strip() == "main"
    res = cancel(repo, "wt", cleanup=True)
    assert "worktree" in res["cleaned"] and not wt.exists()
    assert "task/wt" not in git(repo, "branch")


def test_worktree_mode_merges_from_the_worktree(repo):
    init(repo, "wt", worktree=True)
    wt = repo / ".worktrees" / "task-wt"
    apply(repo, "wt", "plan")
    apply(repo, "wt", "check", checkpoint="post-plan", result="PASS")
    apply(repo, "wt", "exec")
    (wt / "new.txt").write_text("made in the worktree\n")
    commit_work(repo, "wt", "feat", "add new file")
    apply(repo, "wt", "exec", result="(done)")
    apply(repo, "wt", "check", checkpoint="post-exec", result="ACCEPT")
    assert git(repo, "status", "--porcelain").strip() == ""  # the main checkout stays clean
    res = merge(repo, "wt")
    assert res["result"] == "success" and not wt.exists()
    assert (repo / "new.txt").exists() and taskdir.read_index(repo / "TASK" / "wt").meta[
        "status"
    ] == "complete"


def test_commit_work_only_while_executing(repo):
    init(repo, "demo")
    with pytest.raises(TaskError, match="not executing"):
        commit_work(repo, "demo", "feat", "x")
    with pytest.raises(TaskError, match="--type"):
        commit_work(repo, "demo", "init", "x")


def test_annotations_are_applied_and_the_file_removed(repo):
    init(repo, "demo")
    d = repo / "TASK" / "demo"
    (d / "plan.md").write_text("# Plan\n\nStep one: parse input.\nStep two: write output.\n")
    (d / ".tmp-annotations.json").write_text(
        json.dumps(
            {
                "Insert Annotations": [
                    ["Line3:...Step one: parse input.", "\nStep 1b: validate.", "\nStep two..."]
                ],
                "Delete Annotations": [],
                "Replace Annotations": [["Line4:...Step two: ", "write output", "write JSON output", "."]],
                "Comment Annotations": [["Line1:...# ", "Plan", "needs a title", "..."]],
            }
        )
    )
    res = annotate(repo, "demo", "plan.md")
    text = (d / "plan.md").read_text()
    assert "Step 1b: validate." in text and "write JSON output" in text and "> 💬 needs a title" in text
    assert not (d / ".tmp-annotations.json").exists()
    assert len(res["applied"]) == 3


@pytest.mark.parametrize(
    "content, message",
    [
        ("[]", "must hold an object"),
        ('{"Bogus": []}', "unknown key"),
        ('{"Insert Annotations": [["Line1:x", "y"]]}', "must be 3 strings"),
        ('{"Replace Annotations": [["x", "a", "b", "c"]]}', "must start with 'Line<N>:'"),
        ("{", "not valid JSON"),
    ],
)
def test_bad_annotation_files_are_refused(repo, content, message):
    init(repo, "demo")
    d = repo / "TASK" / "demo"
    (d / "plan.md").write_text("# Plan\n")
    (d / ".tmp-annotations.json").write_text(content)
    with pytest.raises(TaskError, match=message):
        annotate(repo, "demo", "plan.md")
    assert (d / ".tmp-annotations.json").exists()  # nothing lost


# --- parallel worktree tasks: the root listing never conflicts ----------------------------------------


def drive_worktree_task(repo, name, filename):
    """A worktree task from init to a post-exec ACCEPT, its work one new file."""
    init(repo, name, worktree=True)
    wt = repo / ".worktrees" / f"task-{name}"
    apply(repo, name, "plan")
    apply(repo, name, "check", checkpoint="post-plan", result="PASS")
    apply(repo, name, "exec")
    (wt / filename).write_text(f"made by {name}\n")
    commit_work(repo, name, "feat", f"add {filename}")
    apply(repo, name, "exec", result="(done)")
    apply(repo, name, "check", checkpoint="post-exec", result="ACCEPT")


def root_listing(repo):
    return (repo / "TASK" / ".index.md").read_text()


def test_parallel_worktree_tasks_both_merge(repo):
    drive_worktree_task(repo, "alpha", "alpha.txt")
    drive_worktree_task(repo, "beta", "beta.txt")  # both branched from the same main
    assert merge(repo, "alpha")["result"] == "success"
    res = merge(repo, "beta")
    assert res["result"] == "success", res
    assert (repo / "alpha.txt").exists() and (repo / "beta.txt").exists()
    listing = root_listing(repo)
    assert "| [alpha](alpha/.index.md) | alpha | complete |" in listing
    assert "| [beta](beta/.index.md) | beta | complete |" in listing
    assert "<<<<<<<" not in listing and "unreadable" not in listing
    assert git(repo, "show", "main:TASK/.index.md") == listing
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "branch", "--show-current").strip() == "main"
    assert subjects(repo, "main")[:2] == [
        "-- ai-cli-task(beta):merge task completed",
        "-- ai-cli-task(beta):merge merge completed task",
    ]


def test_root_listing_is_resolved_and_real_conflicts_are_left(repo):
    drive_worktree_task(repo, "alpha", "alpha.txt")
    init(repo, "beta", worktree=True)
    wt = repo / ".worktrees" / "task-beta"
    for args in (("plan",), ("check", "post-plan", "PASS"), ("exec",)):
        apply(
            repo,
            "beta",
            args[0],
            checkpoint=args[1] if len(args) > 1 else None,
            result=args[2] if len(args) > 2 else None,
        )
    (wt / "app.txt").write_text("line one\nline two\nbeta\n")
    commit_work(repo, "beta", "feat", "beta line")
    apply(repo, "beta", "exec", result="(done)")
    apply(repo, "beta", "check", checkpoint="post-exec", result="ACCEPT")
    assert merge(repo, "alpha")["result"] == "success"
    (repo / "app.txt").write_text("line one\nline two\nmain\n")
    git(repo, "commit", "-qam", "main moved on")
    res = merge(repo, "beta")
    assert res["result"] == "conflict" and res["conflicts"] == ["app.txt"], res
    assert "<<<<<<<" not in root_listing(repo)
    (repo / "app.txt").write_text("line one\nline two\nmain\nbeta\n")
    git(repo, "add", "app.txt")
    assert merge(repo, "beta", cont=True)["result"] == "success"
    assert "| [beta](beta/.index.md) | beta | complete |" in root_listing(repo)
    assert "| [alpha](alpha/.index.md) | alpha | complete |" in root_listing(repo)


def test_gitignore_lines_added_by_init_never_conflict(repo):
    (repo / ".gitignore").write_text("node_modules/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore node_modules")
    drive_worktree_task(repo, "alpha", "alpha.txt")
    drive_worktree_task(repo, "beta", "beta.txt")
    assert merge(repo, "alpha")["result"] == "success"
    with open(repo / ".gitignore", "a") as fh:
        fh.write("dist/\n")  # main's .gitignore moves on at the very place beta's init appended to
    git(repo, "commit", "-qam", "ignore dist")
    res = merge(repo, "beta")
    assert res["result"] == "success", res
    lines = (repo / ".gitignore").read_text().splitlines()
    assert "dist/" in lines and "node_modules/" in lines
    assert all(lines.count(ln) == 1 for ln in taskdir.GITIGNORE_LINES)
    assert git(repo, "status", "--porcelain") == ""


def test_a_task_side_gitignore_edit_is_left_to_the_agent(repo):
    (repo / ".gitignore").write_text("node_modules/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore node_modules")
    init(repo, "demo")
    drive_to_accept(repo)
    with open(repo / ".gitignore", "a") as fh:
        fh.write("build/\n")  # the task's own edit: not loopwright's to decide
    commit_work(repo, "demo", "fix", "ignore build")
    apply(repo, "demo", "check", checkpoint="post-exec", result="ACCEPT")
    git(repo, "checkout", "-q", "main")
    (repo / ".gitignore").write_text("node_modules/\ndist/\n")
    git(repo, "commit", "-qam", "ignore dist")
    git(repo, "checkout", "-q", "task/demo")
    res = merge(repo, "demo")
    assert res["result"] == "conflict" and res["conflicts"] == [".gitignore"], res


# --- init --worktree leaves the main checkout alone ---------------------------------------------------


def test_worktree_init_creates_nothing_in_the_main_checkout(repo):
    init(repo, "wt", worktree=True)
    assert not (repo / "TASK").exists()
    assert git(repo, "status", "--porcelain") == ""
    init(repo, "demo")  # a second module, in the main checkout: its listing is written there
    listing = root_listing(repo)
    assert "unreadable" not in listing and "wt" not in listing and "| [demo](demo/.index.md)" in listing


def test_a_signal_only_directory_is_not_listed(repo):
    init(repo, "wt", worktree=True)
    mod = locate(repo, "wt")
    mod.main_dir.mkdir(parents=True, exist_ok=True)  # as `loopwright signal` makes it
    signals.write_signal(mod.main_dir, "plan", "(generated)", "check", "post-plan")
    init(repo, "demo")
    assert "unreadable" not in root_listing(repo) and "wt" not in root_listing(repo)
    broken = repo / "TASK" / "broken"
    broken.mkdir()
    (broken / ".index.md").write_text("no frontmatter\n")
    taskdir.update_root_index(repo)
    assert "| broken | (unreadable .index.md) | ? |" in root_listing(repo)  # a real module that is damaged


# --- init is all or nothing ------------------------------------------------------------------------


def repo_state(repo):
    """Everything init could touch: branches, worktrees, the checkout, files, status, HEAD."""
    files = sorted(
        str(p.relative_to(repo)) for p in repo.rglob("*") if ".git" not in p.relative_to(repo).parts
    )
    return {
        "branches": git(repo, "branch", "--list"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "status": git(repo, "status", "--porcelain", "--ignored"),
        "files": files,
        "gitignore": (repo / ".gitignore").read_text(),
        "app": (repo / "app.txt").read_text(),
        "head": git(repo, "rev-parse", "HEAD"),
        "exclude": (repo / ".git" / "info" / "exclude").read_text(),
    }


@pytest.fixture
def busy_repo(repo):
    """A repo with a committed .gitignore, another module on main and uncommitted work."""
    (repo / ".gitignore").write_text("node_modules/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore node_modules")
    (repo / "app.txt").write_text("line one\nuncommitted\n")
    return repo


@pytest.mark.parametrize("worktree", [False, True])
def test_init_rolls_everything_back_when_its_commit_fails(busy_repo, worktree):
    repo = busy_repo
    git(repo, "config", "commit.gpgsign", "true")
    git(repo, "config", "gpg.program", "false")  # every commit fails to sign
    before = repo_state(repo)
    with pytest.raises(TaskError) as exc:
        init(repo, "demo", worktree=worktree)
    message = str(exc.value)
    assert "\n" not in message and message.startswith("init TASK/demo failed: git commit")
    assert message.endswith("fix that, then run init again (nothing was left behind)"), message
    assert repo_state(repo) == before
    git(repo, "config", "commit.gpgsign", "false")
    res = init(repo, "demo", worktree=worktree)  # the retry is not refused
    assert res["commit"] and git(repo, "branch", "--list", "task/demo").strip()


@pytest.mark.parametrize("worktree", [False, True])
def test_init_without_a_git_identity_says_how_to_set_one(busy_repo, tmp_path, worktree):
    repo = busy_repo
    home = tmp_path / "empty-home"
    home.mkdir()
    git(repo, "config", "--unset", "user.name")
    git(repo, "config", "--unset", "user.email")
    git(repo, "config", "user.useConfigOnly", "true")  # no guessing from the host name
    env = {
        k: v
        for k, v in lw_env().items()
        if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_")) and k != "EMAIL"
    }
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home), GIT_CONFIG_NOSYSTEM="1")
    before = repo_state(repo)
    args = ["lifecycle", "init", "demo"] + (["--worktree"] if worktree else [])
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "git does not know who you are" in lines[0] and 'git config user.name "Your Name"' in lines[0]
    assert "git config user.email" in lines[0] and lines[0].endswith("(nothing was left behind)")
    assert repo_state(repo) == before
    git(repo, "config", "user.name", "T")
    git(repo, "config", "user.email", "t@example.com")
    again = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr


# --- commit messages follow the seed's convention ------------------------------------------------------


def lw(repo, *args):
    out = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=lw_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out


def test_commit_messages_follow_the_seed_convention(repo):
    lw(repo, "lifecycle", "init", "demo")
    lw(repo, "lifecycle", "plan", "demo")
    lw(repo, "lifecycle", "check", "demo", "--checkpoint", "post-plan", "--result", "PASS")
    lw(repo, "lifecycle", "exec", "demo")
    (repo / "app.txt").write_text("line one\nline two\nfeature\n")
    lw(repo, "lifecycle", "commit", "demo", "--type", "feat", "-m", "add feature line")
    for result, done in (("(step-1)", "1"), ("(done)", "2")):
        lw(
            repo,
            "lifecycle",
            "exec",
            "demo",
            "--result",
            result,
            "--completed-steps",
            done,
            "--total-steps",
            "2",
        )
    lw(repo, "lifecycle", "check", "demo", "--checkpoint", "post-exec", "--result", "ACCEPT")
    lw(repo, "lifecycle", "merge", "demo")
    lw(repo, "lifecycle", "report", "demo")
    flow = list(reversed([s for s in subjects(repo, "main") if s != "base"]))
    assert flow == [
        "-- ai-cli-task(demo):init initialize task module",
        "-- ai-cli-task(demo):plan generate implementation plan",
        "-- ai-cli-task(demo):check post-plan PASS → review",
        "-- ai-cli-task(demo):exec execution started → executing",
        "-- ai-cli-task(demo):feat add feature line",
        "-- ai-cli-task(demo):exec step 1/2 done",
        "-- ai-cli-task(demo):exec step 2/2 done",
        "-- ai-cli-task(demo):check post-exec ACCEPT",
        "-- ai-cli-task(demo):merge merge completed task",
        "-- ai-cli-task(demo):merge task completed",
        "-- ai-cli-task(demo):report generate completion report",
    ]


def test_state_commit_descriptions_never_repeat_their_type(repo):
    init(repo, "demo")
    apply(repo, "demo", "plan")
    apply(repo, "demo", "check", checkpoint="post-plan", result="PASS")
    apply(repo, "demo", "exec", description="exec step 0/5 started")
    apply(repo, "demo", "exec", result="(blocked)")
    subs = [s for s in subjects(repo, "task/demo") if s != "base"]
    assert subs[:2] == [
        "-- ai-cli-task(demo):exec execution blocked",
        "-- ai-cli-task(demo):exec step 0/5 started",
    ]
    first_words = re.compile(r"^-- ai-cli-task\(demo\):(\w+) (\S+)")
    assert not [s for s in subs if first_words.match(s).group(1) == first_words.match(s).group(2)], subs


# --- the merge attempt bound -----------------------------------------------------------------------------


def conflicting_task(repo):
    init(repo, "demo")
    drive_to_accept(repo)
    git(repo, "checkout", "-q", "main")
    (repo / "app.txt").write_text("line one\nline two\nsomething else\n")
    git(repo, "commit", "-qam", "main moved on")
    git(repo, "checkout", "-q", "task/demo")


def test_every_failed_merge_attempt_counts(repo):
    conflicting_task(repo)
    for attempt in (1, 2, 3):
        res = merge(repo, "demo")
        assert (res["result"], res["attempts"]) == ("conflict", attempt), res
        if attempt == 3:  # a merge left in progress: starting another is refused, not counted
            with pytest.raises(TaskError, match="already in progress"):
                merge(repo, "demo")
        aborted = merge(repo, "demo", abort=True)
        assert aborted["aborted"] and aborted["attempts"] == attempt
        assert git(repo, "branch", "--show-current").strip() == "task/demo"
    with pytest.raises(TaskError, match=r"3 merge attempts since the last post-exec ACCEPT") as exc:
        merge(repo, "demo")
    assert "--checkpoint post-exec --result ACCEPT" in str(exc.value)
    assert taskdir.read_index(repo / "TASK" / "demo").meta["status"] == "executing"
    # A new post-exec ACCEPT resets the count.
    apply(repo, "demo", "check", checkpoint="post-exec", result="ACCEPT")
    res = merge(repo, "demo")
    assert (res["result"], res["attempts"]) == ("conflict", 1)


def test_giving_up_does_not_reset_the_bound(repo):
    init(repo, "demo")
    drive_to_accept(repo)
    for attempt in (1, 2, 3):
        res = merge(repo, "demo", verify="false")
        assert res["attempts"] == attempt
    assert res["gave_up"]
    with pytest.raises(TaskError, match="3 merge attempts"):
        merge(repo, "demo", verify="true")
    assert git(repo, "branch", "--show-current").strip() == "task/demo"
    apply(repo, "demo", "check", checkpoint="post-exec", result="ACCEPT")
    assert merge(repo, "demo", verify="true")["result"] == "success"


def test_a_merge_git_refuses_counts_as_an_attempt(repo):
    drive_worktree_task(repo, "wt", "new.txt")
    (repo / "new.txt").write_text("untracked in the main checkout\n")  # the merge would overwrite it
    for attempt in (1, 2, 3):
        refused = rf"git merge failed: .*new\.txt.*\(attempt {attempt} of 3 used\)"
        with pytest.raises(TaskError, match=refused):
            merge(repo, "wt")
    (repo / "new.txt").unlink()
    with pytest.raises(TaskError, match="3 merge attempts"):
        merge(repo, "wt")


# --- the auto loop through the real hook processes ------------------------------------------------


def hook(name, repo, payload):
    out = subprocess.run(
        [str(REPO / "hooks" / name)],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=lw_env(CLAUDE_PROJECT_DIR=str(repo)),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else None


def test_cancelling_the_task_during_auto_ends_the_loop_cancelled(repo):
    init(repo, "demo")
    (repo / "TASK" / "demo" / ".target.md").write_text("# Demo\n\n## Objective\n\nAdd a line.\n")
    started = hook(
        "prompt", repo, {"session_id": "S1", "cwd": str(repo), "prompt": "/loopwright:task auto demo"}
    )
    assert "auto loop" in started["hookSpecificOutput"]["additionalContext"]
    cli = subprocess.run(
        [str(REPO / "bin" / "loopwright"), "-C", str(repo), "lifecycle", "cancel", "demo"],
        capture_output=True,
        text=True,
        env=lw_env(),
    )
    assert cli.returncode == 0, cli.stderr
    # cancel writes .auto-stop (user_stop) as well: the cancelled status must win.
    assert (repo / "TASK" / "demo" / ".auto-stop").exists()
    stop = {
        "session_id": "S1",
        "transcript_path": str(repo / "none.jsonl"),
        "cwd": str(repo),
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": "planning",
    }
    answer = hook("stop", repo, stop)
    assert "decision" not in answer and "CANCELLED" in answer["systemMessage"]
    loop = json.loads((repo / ".loopwright" / "loops" / "task" / "loop.json").read_text())
    assert loop["status"] == "ended" and loop["outcome"] == "CANCELLED"
