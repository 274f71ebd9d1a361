"""A Stop reads loop.json twice (to find its loop, then under the loop's mutex); the second
read of a file unchanged since is not verified again (state/loops.py, _VERIFIED). Any
change, in place or by a copy put back, and another key, are verified as the first time,
also in a process that lives long (the monitor, the runner)."""

from __future__ import annotations

import os

import pytest

from conftest import cli
from loopwright.state import loops, trust


@pytest.fixture
def counted(project, monkeypatch):
    out = cli(project, "start", "--session", "S1", "--max-iterations", "5", "goal")
    assert out.returncode == 0, out.stderr
    calls = []
    real = trust.verify

    def verify(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(trust, "verify", verify)
    return loops.LoopPaths(project / ".loopwright", "prompt"), calls


def test_an_unchanged_loop_json_is_verified_once(counted):
    paths, calls = counted
    first = loops.load_config(paths)
    first["status"] = "changed by the caller"  # what a caller does with its copy changes nothing
    second = loops.load_config(paths)
    assert len(calls) == 1 and second["status"] == loops.ACTIVE


def test_a_file_written_again_is_verified_again_even_with_the_same_bytes(counted):
    paths, calls = counted
    loops.load_config(paths)
    data = paths.config.read_bytes()
    os.unlink(paths.config)
    paths.config.write_bytes(data)  # a copy put back: another inode
    os.chmod(paths.config, 0o600)
    loops.load_config(paths)
    os.utime(paths.config)  # touched in place: another change time
    loops.load_config(paths)
    assert len(calls) == 3


def test_another_key_is_not_taken_for_the_one_that_verified(counted, monkeypatch):
    paths, calls = counted
    loops.load_config(paths)
    monkeypatch.setattr(trust, "load_key", lambda: b"0" * 64)
    with pytest.raises(loops.UntrustedLoop):
        loops.load_config(paths)


def test_an_old_copy_put_back_after_the_end_is_refused_in_the_same_process(project, counted):
    paths, calls = counted
    loops.load_config(paths)
    old = paths.config.read_bytes()
    assert cli(project, "cancel", "prompt").returncode == 0
    os.unlink(paths.config)
    paths.config.write_bytes(old)
    os.chmod(paths.config, 0o600)
    with pytest.raises(loops.EndedCopy):
        loops.load_config(paths)


def test_a_read_between_the_last_save_and_the_record_of_the_end_reads_the_end(project, counted, monkeypatch):
    """A loop that ends saves loop.json, then records its end. A reader (the runner polling)
    that read the active save just before and the record just after reads the file once more
    and finds the loop ended, instead of calling it an older copy (a CI run failed on it)."""
    paths, _ = counted
    stale = loops.load_config(paths)
    assert cli(project, "cancel", "prompt").returncode == 0  # a new save (ended), then the record
    real, served = loops.store.read_json, []

    def read_json(path, **kw):
        if path == paths.config and not served:
            served.append(1)
            return dict(stale)  # what a read just before the end's save returned
        return real(path, **kw)

    monkeypatch.setattr(loops.store, "read_json", read_json)
    cfg = loops.load_config(paths)
    assert served and cfg["status"] != loops.ACTIVE
