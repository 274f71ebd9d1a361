"""Task-module mechanics against real git repositories: init (branch or
worktree), recorded transitions and their commits, dependencies, merge with
conflicts and verification, report from history, cancel, annotations."""

import json
import subprocess

import pytest

from loopwright import taskdir, taskops


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
    taskops.apply(repo, name, "plan")
    taskops.apply(repo, name, "check", checkpoint="post-plan", result="PASS")
    taskops.apply(repo, name, "exec")
    (repo / "app.txt").write_text("line one\nline two\nfeature\n")
    taskops.commit_work(repo, name, "feat", "add feature line")
    taskops.apply(repo, name, "exec", result="(done)")
    taskops.apply(repo, name, "check", checkpoint="post-exec", result="ACCEPT")


def test_init_creates_the_module_branch_and_convention_commit(repo):
    res = taskops.init(repo, "demo", title="Demo", tags=["api"])
    d = repo / "TASK" / "demo"
    assert res["branch"] == "task/demo" and git(repo, "branch", "--show-current").strip() == "task/demo"
    meta = taskdir.read_index(d).meta
    assert (meta["status"], meta["title"], meta["tags"], meta["branch"], meta["worktree"]) == ("draft", "Demo", ["api"], "task/demo", "")
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
    with pytest.raises(taskops.TaskError, match=message):
        taskops.init(repo, name)


def test_init_needs_git_with_a_commit(tmp_path):
    with pytest.raises(taskops.TaskError, match="not a git repository"):
        taskops.init(tmp_path, "demo")
    git(tmp_path, "init", "-q")
    with pytest.raises(taskops.TaskError, match="no commit yet"):
        taskops.init(tmp_path, "demo")


def test_init_twice_is_refused(repo):
    taskops.init(repo, "demo")
    with pytest.raises(taskops.TaskError, match="already exists"):
        taskops.init(repo, "demo")


def test_full_lifecycle_merge_and_report_from_history(repo):
    taskops.init(repo, "demo")
    drive_to_accept(repo)
    res = taskops.merge(repo, "demo")
    assert res["result"] == "success" and "branch task/demo" in res["cleaned"]
    assert git(repo, "branch", "--show-current").strip() == "main"
    assert "task/demo" not in git(repo, "branch")
    assert taskdir.read_index(repo / "TASK" / "demo").meta["status"] == "complete"
    assert "feature" in (repo / "app.txt").read_text()
    rep = taskops.report(repo, "demo")
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
    taskops.init(repo, "base-work")
    git(repo, "checkout", "-q", "main")
    taskops.init(repo, "demo")
    idx = taskdir.read_index(repo / "TASK" / "demo")
    idx.meta["depends_on"] = ["base-work"]
    taskdir.write_index(repo / "TASK" / "demo", idx)
    git(repo, "commit", "-qam", "deps")
    taskops.apply(repo, "demo", "plan")
    taskops.apply(repo, "demo", "check", checkpoint="post-plan", result="PASS")
    with pytest.raises(taskops.TaskError, match=r"dependencies complete first; not complete: base-work \(missing\)"):
        taskops.apply(repo, "demo", "exec")
    assert taskops.status(repo, "demo")["blocking_dependencies"] == ["base-work (missing)"]


def test_merge_needs_an_accept_after_the_last_exec(repo):
    taskops.init(repo, "demo")
    drive_to_accept(repo)
    taskops.apply(repo, "demo", "exec", result="(done)")  # more work after the verdict
    with pytest.raises(taskops.TaskError, match="needs an ACCEPT"):
        taskops.merge(repo, "demo")


def test_merge_refused_outside_executing(repo):
    taskops.init(repo, "demo")
    with pytest.raises(taskops.TaskError, match="merge is not allowed while the task is draft"):
        taskops.merge(repo, "demo")


def test_merge_conflict_then_resolution_with_verification(repo):
    taskops.init(repo, "demo")
    drive_to_accept(repo)
    git(repo, "checkout", "-q", "main")
    (repo / "app.txt").write_text("line one\nline two\nsomething else\n")
    git(repo, "commit", "-qam", "main moved on")
    git(repo, "checkout", "-q", "task/demo")
    res = taskops.merge(repo, "demo")
    assert res["result"] == "conflict" and res["conflicts"] == ["app.txt"]
    with pytest.raises(taskops.TaskError, match="still conflicted: app.txt"):
        taskops.merge(repo, "demo", cont=True)
    (repo / "app.txt").write_text("line one\nline two\nsomething else\nfeature\n")
    git(repo, "add", "app.txt")
    # A verification that fails undoes the merge and counts an attempt.
    res = taskops.merge(repo, "demo", cont=True, verify="grep -q nothing-like-this app.txt")
    assert res["result"] == "conflict" and res["attempts"] == 1
    assert taskdir.read_index(repo / "TASK" / "demo").meta["status"] == "executing" if (repo / "TASK/demo/.index.md").exists() else True
    git(repo, "checkout", "-q", "task/demo")
    res = taskops.merge(repo, "demo")
    assert res["result"] == "conflict"
    (repo / "app.txt").write_text("line one\nline two\nsomething else\nfeature\n")
    git(repo, "add", "app.txt")
    res = taskops.merge(repo, "demo", cont=True, verify="grep -q feature app.txt")
    assert res["result"] == "success"
    assert "-- ai-cli-task(demo):merge resolve merge conflict" in subjects(repo, "main")


def test_merge_gives_up_after_three_failed_verifications(repo):
    taskops.init(repo, "demo")
    drive_to_accept(repo)
    for attempt in range(1, 4):
        git(repo, "checkout", "-q", "task/demo")
        res = taskops.merge(repo, "demo", verify="false")
        assert res["result"] == "conflict" and res["attempts"] == attempt
    assert res.get("gave_up")
    git(repo, "checkout", "-q", "task/demo")
    assert taskdir.read_index(repo / "TASK" / "demo").meta["status"] == "executing"


def test_cancel_snapshots_uncommitted_work_and_can_clean_up(repo):
    taskops.init(repo, "demo")
    (repo / "wip.txt").write_text("unfinished")
    res = taskops.cancel(repo, "demo", "changed plans")
    assert res["snapshot"] and res["to"] == "cancelled"
    assert subjects(repo, "task/demo")[:2] == ["-- ai-cli-task(demo):cancel changed plans",
                                                "-- ai-cli-task(demo):cancel snapshot uncommitted changes"]
    assert json.loads((repo / "TASK/demo/.auto-stop").read_text())["reason"] == "user_stop"
    again = taskops.cancel(repo, "demo")
    assert again["noop"]


def test_cancel_with_cleanup_removes_branch_and_worktree(repo):
    taskops.init(repo, "wt", worktree=True)
    wt = repo / ".worktrees" / "task-wt"
    assert (wt / "TASK" / "wt" / ".index.md").exists() and (repo / "TASK" / "wt").is_dir()
    assert git(repo, "branch", "--show-current").strip() == "main"
    res = taskops.cancel(repo, "wt", cleanup=True)
    assert "worktree" in res["cleaned"] and not wt.exists()
    assert "task/wt" not in git(repo, "branch")


def test_worktree_mode_merges_from_the_worktree(repo):
    taskops.init(repo, "wt", worktree=True)
    wt = repo / ".worktrees" / "task-wt"
    taskops.apply(repo, "wt", "plan")
    taskops.apply(repo, "wt", "check", checkpoint="post-plan", result="PASS")
    taskops.apply(repo, "wt", "exec")
    (wt / "new.txt").write_text("made in the worktree\n")
    taskops.commit_work(repo, "wt", "feat", "add new file")
    taskops.apply(repo, "wt", "exec", result="(done)")
    taskops.apply(repo, "wt", "check", checkpoint="post-exec", result="ACCEPT")
    assert git(repo, "status", "--porcelain").strip() == ""  # the main checkout stays clean
    res = taskops.merge(repo, "wt")
    assert res["result"] == "success" and not wt.exists()
    assert (repo / "new.txt").exists() and taskdir.read_index(repo / "TASK" / "wt").meta["status"] == "complete"


def test_commit_work_only_while_executing(repo):
    taskops.init(repo, "demo")
    with pytest.raises(taskops.TaskError, match="not executing"):
        taskops.commit_work(repo, "demo", "feat", "x")
    with pytest.raises(taskops.TaskError, match="--type"):
        taskops.commit_work(repo, "demo", "init", "x")


def test_annotations_are_applied_and_the_file_removed(repo):
    taskops.init(repo, "demo")
    d = repo / "TASK" / "demo"
    (d / "plan.md").write_text("# Plan\n\nStep one: parse input.\nStep two: write output.\n")
    (d / ".tmp-annotations.json").write_text(json.dumps({
        "Insert Annotations": [["Line3:...Step one: parse input.", "\nStep 1b: validate.", "\nStep two..."]],
        "Delete Annotations": [],
        "Replace Annotations": [["Line4:...Step two: ", "write output", "write JSON output", "."]],
        "Comment Annotations": [["Line1:...# ", "Plan", "needs a title", "..."]],
    }))
    res = taskops.annotate(repo, "demo", "plan.md")
    text = (d / "plan.md").read_text()
    assert "Step 1b: validate." in text and "write JSON output" in text and "> 💬 needs a title" in text
    assert not (d / ".tmp-annotations.json").exists()
    assert len(res["applied"]) == 3


@pytest.mark.parametrize("content, message", [
    ("[]", "must hold an object"), ('{"Bogus": []}', "unknown key"),
    ('{"Insert Annotations": [["Line1:x", "y"]]}', "must be 3 strings"),
    ('{"Replace Annotations": [["x", "a", "b", "c"]]}', "must start with 'Line<N>:'"), ("{", "not valid JSON"),
])
def test_bad_annotation_files_are_refused(repo, content, message):
    taskops.init(repo, "demo")
    d = repo / "TASK" / "demo"
    (d / "plan.md").write_text("# Plan\n")
    (d / ".tmp-annotations.json").write_text(content)
    with pytest.raises(taskops.TaskError, match=message):
        taskops.annotate(repo, "demo", "plan.md")
    assert (d / ".tmp-annotations.json").exists()  # nothing lost
