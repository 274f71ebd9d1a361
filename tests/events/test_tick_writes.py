"""What an ordinary Stop of the owning session writes, and what it flushes to disk.

The tick is committed by one atomic replace of budget.json (tick/commit.py): its new content
is flushed before it takes the old one's place, so a machine that dies leaves one whole
version or the other. Nothing else is flushed: the effects that follow the commit (history
and journal lines, the ledger, progress, the heartbeat) can all be redone from the commit
record, and the file system keeps them in order with it (store.write_bytes_atomic)."""

from __future__ import annotations

import json
import os

import pytest

from conftest import cli
from loopwright.events import stop as hook

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names flushed files by /proc")


def test_an_ordinary_tick_flushes_its_commit_and_nothing_else(project, monkeypatch, capsysbinary):
    assert cli(project, "start", "--session", "S1", "--max-iterations", "9", "goal").returncode == 0
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(project))
    monkeypatch.setenv("LOOPWRIGHT_CATCH_UP_SECONDS", "0")
    flushed, renamed = [], []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        flushed.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        renamed.append((os.path.basename(str(src)), os.path.basename(str(dst))))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    event = {"session_id": "S1", "transcript_path": str(project / "none.jsonl"), "cwd": str(project)}
    for _ in range(2):
        flushed.clear(), renamed.clear()
        hook.main_with(json.dumps(dict(event, stop_hook_active=True)).encode())
        answer = json.loads(capsysbinary.readouterr().out)
        assert answer["decision"] == "block", answer
        # One flush, of budget.json's new content, before it replaced the old one.
        assert len(flushed) == 1 and flushed[0].startswith(".budget.json.tmp-"), flushed
        assert renamed[0] == (flushed[0], "budget.json"), renamed
        written = {"budget.json", "progress.json", "loop.lock", "token-ledger.json"}
        assert {dst for _, dst in renamed} == written, renamed
    history = (project / ".loopwright" / "loops" / "prompt" / "history.jsonl").read_text().splitlines()
    assert len(history) == 2  # appended, as before: only not flushed
