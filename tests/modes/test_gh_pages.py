"""GitHub lists longer than one page, through the real ``gh`` against tests/fakegithub.py:
the fake pages every list as GitHub's REST API does (``per_page``, ``page``, ``Link``), and
serves sub-issues and issue dependencies in GitHub's shape; review mode reads check runs
from every page."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

import fakegithub
from loopwright.modes import gh
from loopwright.modes.review import watch

pytestmark = pytest.mark.skipif(
    shutil.which("gh") is None or shutil.which("openssl") is None, reason="needs gh, openssl"
)


@pytest.fixture
def github(tmp_path, monkeypatch):
    with fakegithub.FakeGitHub(tmp_path / "gh") as fake:
        for k, v in fake.env().items():
            monkeypatch.setenv(k, v)
        yield fake


def gh_api(*args: str):
    out = subprocess.run(["gh", "api", *args], capture_output=True, text=True, timeout=60, env=os.environ)
    assert out.returncode == 0, out.stderr
    return out.stdout


def client(github) -> gh.Gh:
    return gh.Gh(gh.Repo(github.host, github.repo.slug))


def test_lists_come_in_pages_with_a_link_header_like_githubs(github):
    for n in range(75):
        github.add_issue(f"issue {n + 1}")
    raw = gh_api("-i", "repos/acme/widgets/issues?per_page=10&page=2")
    head, _, body = raw.partition("\r\n\r\n") if "\r\n\r\n" in raw else raw.partition("\n\n")
    links = dict(
        (rel, int(page)) for page, rel in re.findall(r"<[^>]*[?&]page=(\d+)[^>]*>; rel=\"(\w+)\"", head)
    )
    assert links == {"next": 3, "last": 8, "first": 1, "prev": 1}
    assert [i["number"] for i in json.loads(body)] == list(range(65, 55, -1))  # newest first
    assert len(json.loads(gh_api("repos/acme/widgets/issues"))) == 30  # GitHub's default page
    assert len(json.loads(gh_api("repos/acme/widgets/issues?per_page=500"))) == 75  # at most 100 a page
    last = gh_api("-i", "repos/acme/widgets/issues?per_page=10&page=8")
    assert 'rel="next"' not in last and len(json.loads(last[last.index("[") :])) == 5


def test_gh_paginate_walks_every_page_once(github):
    for n in range(230):
        github.add_issue(f"issue {n + 1}")
    listed = client(github).api("repos/acme/widgets/issues?state=open&per_page=100", paginate=True)
    assert [i["number"] for i in listed] == list(range(230, 0, -1))
    pages = [p for _, p in github.requests if "/issues?" in p]
    assert len(pages) == 3 and pages[-1].endswith("page=3")


def test_sub_issues_and_dependencies_are_served_in_githubs_shape(github):
    blocked, blocker, parent, child = (github.add_issue(t) for t in ("blocked", "blocker", "parent", "child"))
    ids = {n: github.repo.issues[n]["id"] for n in (blocker, child)}
    gh_api(
        "-X",
        "POST",
        f"repos/acme/widgets/issues/{blocked}/dependencies/blocked_by",
        "-F",
        f"issue_id={ids[blocker]}",
    )
    gh_api("-X", "POST", f"repos/acme/widgets/issues/{parent}/sub_issues", "-F", f"sub_issue_id={ids[child]}")
    one = json.loads(gh_api(f"repos/acme/widgets/issues/{blocked}"))
    assert one["issue_dependencies_summary"] == {
        "blocked_by": 1,
        "total_blocked_by": 1,
        "blocking": 0,
        "total_blocking": 0,
    }
    blockers = json.loads(gh_api(f"repos/acme/widgets/issues/{blocked}/dependencies/blocked_by"))
    assert [(b["number"], b["state"]) for b in blockers] == [(blocker, "open")]
    assert [
        b["number"] for b in json.loads(gh_api(f"repos/acme/widgets/issues/{blocker}/dependencies/blocking"))
    ] == [blocked]
    github.close(child)
    github.close(blocker)
    listed = {i["number"]: i for i in json.loads(gh_api("repos/acme/widgets/issues"))}
    assert listed[parent]["sub_issues_summary"] == {"total": 1, "completed": 1, "percent_completed": 100}
    assert listed[blocked]["issue_dependencies_summary"]["blocked_by"] == 0
    kids = json.loads(gh_api(f"repos/acme/widgets/issues/{parent}/sub_issues"))
    assert [(k["number"], k["state"]) for k in kids] == [(child, "closed")]


def test_a_server_without_dependencies_has_no_summaries_and_no_such_endpoints(tmp_path, monkeypatch):
    with fakegithub.FakeGitHub(tmp_path / "plain", dependencies=False) as fake:
        for k, v in fake.env().items():
            monkeypatch.setenv(k, v)
        n = fake.add_issue("plain")
        issue = json.loads(gh_api(f"repos/acme/widgets/issues/{n}"))
        assert "sub_issues_summary" not in issue and "issue_dependencies_summary" not in issue
        out = subprocess.run(
            ["gh", "api", f"repos/acme/widgets/issues/{n}/sub_issues"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode != 0 and "404" in out.stderr


def test_review_reads_check_runs_from_every_page(github):
    pr = github.open_pull("Render", "carol/render")
    runs = [{"name": f"ci-{n}", "status": "completed", "conclusion": "success"} for n in range(130)]
    runs[120]["conclusion"] = "failure"  # on the second page, even at 100 runs a page
    github.repo.checks[github.pull(pr)["head"]["sha"]] = runs
    cfg = {"pr": pr, "repo": {"host": github.host, "slug": github.repo.slug}, "login": "loop-bot"}
    view = watch.read(cfg)
    assert view.problem is None and len(view.checks) == 130
    assert {"name": "ci-120", "status": "completed", "conclusion": "failure"} in view.checks
    assert len([p for _, p in github.requests if "/check-runs" in p]) == 2
