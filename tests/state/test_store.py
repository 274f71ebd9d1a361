"""Safe files: atomic JSON, locked JSONL appends, corrupt files moved aside."""

import json
import os

import pytest

from loopwright.state import store


def test_write_json_replaces_atomically_and_leaves_no_temp_files(tmp_path):
    p = tmp_path / "a.json"
    store.write_json(p, {"x": 1})
    store.write_json(p, {"x": 2})
    assert json.loads(p.read_text()) == {"x": 2}
    assert sorted(os.listdir(tmp_path)) == ["a.json"]


def test_missing_file_reads_as_none(tmp_path):
    assert store.read_json(tmp_path / "nope.json") is None


@pytest.mark.parametrize(
    "content, detail",
    [(b"{not json", "invalid JSON"), (b"", "empty file"), (b"[1, 2]", "expected a JSON dict")],
)
def test_corrupt_file_is_moved_aside_and_reported(tmp_path, content, detail):
    p = tmp_path / "budget.json"
    p.write_bytes(content)
    with pytest.raises(store.CorruptFile, match=detail) as exc:
        store.read_json(p)
    assert not p.exists()
    assert exc.value.moved_to.name.startswith("budget.json.corrupt-")
    assert exc.value.moved_to.read_bytes() == content  # nothing lost


def test_dry_run_read_leaves_a_corrupt_file_in_place(tmp_path):
    p = tmp_path / "loop.json"
    p.write_text("{")
    with pytest.raises(store.CorruptFile):
        store.read_json(p, move_corrupt=False)
    assert p.read_text() == "{"


def test_second_corrupt_copy_gets_its_own_name(tmp_path):
    p = tmp_path / "x.json"
    for _ in range(2):
        p.write_text("{")
        with pytest.raises(store.CorruptFile):
            store.read_json(p)
    assert len(list(tmp_path.glob("x.json.corrupt-*"))) == 2


def test_append_after_a_torn_line_starts_on_a_fresh_line(tmp_path):
    p = tmp_path / "h.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": ')  # a writer died mid-line
    store.append_jsonl(p, {"c": 3})
    records, problems = store.read_jsonl(p)
    assert records == [{"a": 1}, {"c": 3}]
    assert len(problems) == 1 and problems[0].lineno == 2 and "h.jsonl:2" in str(problems[0])


def test_read_jsonl_reports_non_objects(tmp_path):
    p = tmp_path / "h.jsonl"
    p.write_text('{"a": 1}\n[1]\n\n{"b": 2}\n')
    records, problems = store.read_jsonl(p)
    assert records == [{"a": 1}, {"b": 2}]
    assert [pr.lineno for pr in problems] == [2]


def test_last_record_reads_from_the_end(tmp_path):
    p = tmp_path / "h.jsonl"
    with open(p, "w") as fh:
        for i in range(5000):
            fh.write(json.dumps({"i": i, "pad": "x" * 100}) + "\n")
        fh.write('{"torn": ')
    assert store.last_jsonl_record(p)["i"] == 4999
    assert store.last_jsonl_record(tmp_path / "none.jsonl") is None


def test_file_lock_excludes_other_processes(tmp_path):
    import multiprocessing as mp
    import time

    target = tmp_path / "lockfile"
    marks = tmp_path / "marks"

    def worker(n):
        for _ in range(20):
            with store.file_lock(target), open(marks, "a") as fh:
                fh.write(f"{n}<")
                fh.flush()
                time.sleep(0.001)
                fh.write(f"{n}>")

    procs = [mp.get_context("fork").Process(target=worker, args=(i,)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    text = marks.read_text()
    pairs = text.split(">")[:-1]
    assert len(pairs) == 80
    assert all(p.count("<") == 1 for p in pairs)
