"""Incremental transcript reading: usage per message id, partial lines,
rotation, compaction, and the final assistant message."""

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwright.state.transcript import FIRST_READ_WINDOW, Cursor, read_increment


def assistant(mid, blocks, usage=None, model="claude-sonnet-4-5", sidechain=False):
    return {
        "type": "assistant",
        "isSidechain": sidechain,
        "message": {
            "id": mid,
            "model": model,
            "role": "assistant",
            "content": blocks,
            "usage": usage
            or {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 2,
                "cache_read_input_tokens": 1,
            },
        },
    }


def user(text):
    return {"type": "user", "message": {"role": "user", "content": text}}


def write(path: Path, *entries, mode="a"):
    with open(path, mode) as fh:
        for e in entries:
            fh.write(json.dumps(e) + "\n")


def test_message_spanning_lines_is_counted_once(tmp_path):
    t = tmp_path / "t.jsonl"
    write(
        t,
        user("go"),
        assistant("m1", [{"type": "text", "text": "Running it."}]),
        assistant("m1", [{"type": "tool_use", "id": "tu1", "name": "Bash", "input": {}}]),
    )
    inc = read_increment(str(t), Cursor(offset=0))
    assert inc.usage["claude-sonnet-4-5"] == {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 2,
        "cache_read_input_tokens": 1,
    }
    assert inc.used_tool
    assert inc.final_blocks == ["Running it."]


def test_final_message_joins_its_text_blocks_and_ignores_user_lines(tmp_path):
    t = tmp_path / "t.jsonl"
    write(
        t,
        assistant("m1", [{"type": "text", "text": "first"}]),
        user("<promise>DONE</promise>"),
        assistant("m2", [{"type": "text", "text": "part one"}]),
        assistant("m2", [{"type": "text", "text": "<promise>DONE</promise>"}]),
    )
    inc = read_increment(str(t), Cursor(offset=0))
    assert inc.final_text == "part one\n<promise>DONE</promise>"
    assert not inc.used_tool


def test_sidechain_lines_count_usage_but_are_not_the_final_message(tmp_path):
    t = tmp_path / "t.jsonl"
    write(
        t,
        assistant("m1", [{"type": "text", "text": "main"}]),
        assistant("s1", [{"type": "text", "text": "sub"}], sidechain=True),
    )
    inc = read_increment(str(t), Cursor(offset=0))
    assert inc.final_text == "main"
    assert inc.usage["claude-sonnet-4-5"]["input_tokens"] == 20


def test_incremental_reads_only_new_bytes_and_keep_counting_split_messages(tmp_path):
    t = tmp_path / "t.jsonl"
    write(t, assistant("m1", [{"type": "text", "text": "a"}], {"input_tokens": 10, "output_tokens": 1}))
    first = read_increment(str(t), Cursor(offset=0))
    # The same message continues on a later line with a larger output count.
    write(
        t,
        assistant("m1", [{"type": "text", "text": "b"}], {"input_tokens": 10, "output_tokens": 4}),
        assistant("m2", [{"type": "text", "text": "c"}], {"input_tokens": 3, "output_tokens": 2}),
    )
    second = read_increment(str(t), first.cursor)
    assert second.bytes_read < t.stat().st_size
    assert first.usage["claude-sonnet-4-5"]["output_tokens"] == 1
    assert second.usage["claude-sonnet-4-5"]["output_tokens"] == 3 + 2
    assert second.usage["claude-sonnet-4-5"]["input_tokens"] == 3
    assert (first.requests, second.requests) == (1, 1)  # m1 read on is the same request


def test_partial_last_line_waits_for_the_next_tick(tmp_path):
    t = tmp_path / "t.jsonl"
    line = json.dumps(assistant("m1", [{"type": "text", "text": "x"}]))
    t.write_text(line[:40])
    inc = read_increment(str(t), Cursor(offset=0))
    assert inc.cursor.offset == 0 and not inc.usage
    with open(t, "a") as fh:
        fh.write(line[40:] + "\n")
    inc2 = read_increment(str(t), inc.cursor)
    assert inc2.usage["claude-sonnet-4-5"]["input_tokens"] == 10


def test_garbage_lines_are_skipped(tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text(
        '{"type":"assistant", broken\n' + json.dumps(assistant("m1", [{"type": "text", "text": "ok"}])) + "\n"
    )
    inc = read_increment(str(t), Cursor(offset=0))
    assert inc.bad_lines == 1 and inc.final_text == "ok"


def test_rotated_or_shorter_transcript_is_reread_from_the_start(tmp_path):
    t = tmp_path / "t.jsonl"
    write(t, *[assistant(f"m{i}", [{"type": "text", "text": "x" * 50}]) for i in range(5)])
    cur = read_increment(str(t), Cursor(offset=0)).cursor
    write(t, assistant("n1", [{"type": "text", "text": "fresh"}]), mode="w")
    inc = read_increment(str(t), cur)
    assert inc.final_text == "fresh"
    assert any("shorter" in n for n in inc.notes)


def test_another_transcript_path_resets_the_cursor(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write(a, assistant("m1", [{"type": "text", "text": "a"}]))
    write(b, assistant("m9", [{"type": "text", "text": "b"}]))
    cur = read_increment(str(a), Cursor(offset=0)).cursor
    inc = read_increment(str(b), cur)
    assert inc.final_text == "b" and inc.cursor.path == str(b)


def test_compaction_boundary_is_noticed(tmp_path):
    t = tmp_path / "t.jsonl"
    write(t, {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"})
    assert read_increment(str(t), Cursor(offset=0)).compacted


def test_first_read_starts_at_the_nonce(tmp_path):
    t = tmp_path / "t.jsonl"
    write(t, *[assistant(f"old{i}", [{"type": "text", "text": "old"}]) for i in range(20)])
    write(t, user("loop-nonce: lw-abc"), assistant("new", [{"type": "text", "text": "new"}]))
    inc = read_increment(str(t), Cursor(), nonce="lw-abc")
    assert inc.nonce_seen
    assert inc.usage["claude-sonnet-4-5"]["input_tokens"] == 10  # only the message after the nonce


def test_first_read_without_nonce_reads_only_a_bounded_window(tmp_path):
    t = tmp_path / "t.jsonl"
    filler = json.dumps(user("y" * 1000)) + "\n"
    with open(t, "w") as fh:
        fh.write(filler * (FIRST_READ_WINDOW // len(filler) + 100))
    write(t, assistant("m", [{"type": "text", "text": "tail"}]))
    inc = read_increment(str(t), Cursor())
    assert inc.bytes_read <= FIRST_READ_WINDOW
    assert inc.final_text == "tail"


def test_missing_transcript_is_a_note_not_an_error(tmp_path):
    inc = read_increment(str(tmp_path / "nope.jsonl"), Cursor(offset=0))
    assert inc.notes and not inc.usage


usage_st = st.fixed_dictionaries({"input_tokens": st.integers(0, 500), "output_tokens": st.integers(0, 500)})


@settings(max_examples=60, deadline=None)
@given(
    messages=st.lists(st.tuples(st.integers(1, 3), usage_st), min_size=1, max_size=8),
    cuts=st.lists(st.integers(0, 10_000), max_size=5),
)
def test_any_split_into_ticks_counts_the_same_as_one_read(tmp_path_factory, messages, cuts):
    """However the transcript grows between ticks (even mid-line), the totals match."""
    d = tmp_path_factory.mktemp("t")
    lines = []
    for i, (nlines, usage) in enumerate(messages):
        for j in range(nlines):
            lines.append(json.dumps(assistant(f"m{i}", [{"type": "text", "text": f"{i}.{j}"}], usage)) + "\n")
    data = "".join(lines)
    whole = d / "whole.jsonl"
    whole.write_text(data)
    once = read_increment(str(whole), Cursor(offset=0))
    expected = once.usage
    assert once.requests == len(messages)  # one model request per message id, however many lines
    grown = d / "grown.jsonl"
    grown.write_text("")
    cursor, totals, requests = Cursor(offset=0), {}, 0
    for cut in sorted({min(c, len(data)) for c in cuts} | {len(data)}):
        grown.write_text(data[:cut])
        inc = read_increment(str(grown), cursor)
        cursor, requests = inc.cursor, requests + inc.requests
        for model, counts in inc.usage.items():
            slot = totals.setdefault(model, dict.fromkeys(counts, 0))
            for k, v in counts.items():
                slot[k] += v
    assert totals == expected and requests == len(messages)


def stamped(entry, ts):
    return dict(entry, timestamp=ts)


def test_rewritten_transcript_does_not_count_old_messages_twice(tmp_path):
    t = tmp_path / "t.jsonl"
    old = [
        stamped(assistant(f"m{i}", [{"type": "text", "text": "x" * 40}]), f"2026-11-22T10:00:0{i}.000Z")
        for i in range(3)
    ]
    write(t, *old)
    first = read_increment(str(t), Cursor(offset=0))
    assert first.usage["claude-sonnet-4-5"]["input_tokens"] == 30
    # The file is rewritten shorter, keeping one old message and adding a new one.
    write(
        t,
        old[2],
        stamped(assistant("m9", [{"type": "text", "text": "new"}]), "2026-11-22T10:05:00.000Z"),
        mode="w",
    )
    again = read_increment(str(t), first.cursor)
    assert again.usage["claude-sonnet-4-5"]["input_tokens"] == 10  # only the new message


def test_a_new_transcript_file_skips_copies_of_counted_messages(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    msg = stamped(assistant("m1", [{"type": "text", "text": "a"}]), "2026-11-22T10:00:00.000Z")
    write(a, msg)
    cur = read_increment(str(a), Cursor(offset=0)).cursor
    write(b, msg, stamped(assistant("m2", [{"type": "text", "text": "b"}]), "2026-11-22T10:01:00.000Z"))
    inc = read_increment(str(b), cur)
    assert inc.usage["claude-sonnet-4-5"]["input_tokens"] == 10
