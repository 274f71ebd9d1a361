"""The router's incremental view of the tasks equals the whole registry's, whatever
was appended, however often it was read, and whatever happened to the file."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwright.state import taskindex
from loopwright.state import tasks as taskreg

ID = st.integers(min_value=1, max_value=12).map(lambda n: f"task-{n}")
STAMP = st.sampled_from(["2026-11-22T10:00:00Z", "2026-11-22T10:00:01Z", "2026-11-22T11:00:00Z"])
TASK = st.fixed_dictionaries(
    {
        "id": ID,
        "type": st.just("task"),
        "text": st.sampled_from(["a", "fix the parser", "x" * 300]),
        "status": st.sampled_from(["open", "done"]),
        "created": STAMP,
    },
    optional={"completed": STAMP, "depends_on": st.lists(ID, max_size=2)},
)
GRAVE = st.fixed_dictionaries(
    {"id": ID, "type": st.just("task-tombstone"), "target_id": ID, "reason": st.just("x")}
)
LINE = st.one_of(
    TASK.map(json.dumps), GRAVE.map(json.dumps), st.sampled_from(["not json", "[1]", '{"type":"task"}'])
)


def same(view, reg, budget: int) -> None:
    assert (view.open_count, view.done_count, view.total) == (len(reg.open), len(reg.done), reg.total)
    assert taskreg.render(view, budget) == taskreg.render(reg, budget)
    assert taskreg.pressure_line(view) == taskreg.pressure_line(reg)
    assert view.cycle == taskreg.dependency_cycle(reg)
    assert view.open_ids_head == [t["id"] for t in reg.open[: taskreg.OPEN_IDS_SHOWN]]


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(LINE, max_size=15), min_size=1, max_size=5),
    budget=st.sampled_from([60, 300, 4000]),
    partial=st.booleans(),
)
def test_incremental_view_equals_the_whole_registry(tmp_path_factory, batches, budget, partial):
    d = tmp_path_factory.mktemp("idx")
    path, index = d / "tasks.jsonl", d / "tasks-index.sqlite"
    path.write_text("")
    saved, taskindex.SMALL_FILE = taskindex.SMALL_FILE, 0  # every file goes through the index
    try:
        _append_and_compare(path, index, batches, budget, partial)
    finally:
        taskindex.SMALL_FILE = saved


def _append_and_compare(path, index, batches, budget, partial) -> None:
    for batch in batches:
        with open(path, "a") as fh:
            fh.write("".join(line + "\n" for line in batch))
            if partial:
                fh.write('{"id": "task-1", "ty')  # a line still being written
        view = taskindex.view(path, index, budget)
        with open(path, "rb+") as fh:  # the writer finishes (or drops) its partial line
            data = fh.read()
            if partial:
                fh.seek(0)
                fh.truncate()
                fh.write(data[: data.rfind(b"\n") + 1])
        same(view, taskreg.load(path), budget)
    same(taskindex.view(path, index, budget), taskreg.load(path), budget)


def big_registry(path, n: int) -> None:
    with open(path, "w") as fh:
        for i in range(1, n + 1):
            fh.write(
                json.dumps(
                    {
                        "id": f"task-{i}",
                        "type": "task",
                        "text": f"item {i}",
                        "status": "open",
                        "created": "2026-11-22T10:00:00Z",
                    }
                )
                + "\n"
            )
            if i % 3 == 0:
                fh.write(
                    json.dumps(
                        {
                            "id": f"task-{i}",
                            "type": "task",
                            "text": f"item {i}",
                            "status": "done",
                            "created": "2026-11-22T10:00:00Z",
                            "completed": "2026-11-22T11:00:00Z",
                        }
                    )
                    + "\n"
                )
            if i % 10 == 0:
                fh.write(
                    json.dumps({"id": f"t-{i}", "type": "task-tombstone", "target_id": f"task-{i - 1}"})
                    + "\n"
                )


def test_large_registry_uses_the_index_and_rebuilds_when_the_file_is_rewritten(tmp_path):
    path, index = tmp_path / "tasks.jsonl", tmp_path / "idx.sqlite"
    big_registry(path, 5000)
    assert path.stat().st_size > taskindex.SMALL_FILE
    same(taskindex.view(path, index, 4000), taskreg.load(path), 4000)
    assert index.exists()
    with open(path, "a") as fh:
        fh.write(
            json.dumps(
                {
                    "id": "task-1",
                    "type": "task",
                    "text": "reopened",
                    "status": "open",
                    "created": "2026-11-01T00:00:00Z",
                }
            )
            + "\n"
        )
    same(taskindex.view(path, index, 4000), taskreg.load(path), 4000)
    # Rewritten in place (same size, same inode): the fingerprints notice.
    data = path.read_bytes().replace(b'"item 2"', b'"ITEM 2"')
    with open(path, "r+b") as fh:
        fh.write(data)
    same(taskindex.view(path, index, 4000), taskreg.load(path), 4000)
    # Replaced by a shorter file.
    big_registry(path, 4000)
    same(taskindex.view(path, index, 4000), taskreg.load(path), 4000)


def test_a_corrupt_index_is_rebuilt_and_a_symlinked_one_bypassed(tmp_path):
    path, index = tmp_path / "tasks.jsonl", tmp_path / "idx.sqlite"
    big_registry(path, 5000)
    index.write_bytes(b"this is not a database" * 100)
    same(taskindex.view(path, index, 4000), taskreg.load(path), 4000)  # discarded, answered from the file
    same(taskindex.view(path, index, 4000), taskreg.load(path), 4000)  # then rebuilt
    assert index.exists()
    index.unlink()
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    index.symlink_to(target)
    same(taskindex.view(path, index, 4000), taskreg.load(path), 4000)
    assert target.read_text() == "keep"
