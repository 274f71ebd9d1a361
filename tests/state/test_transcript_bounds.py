"""Transcript reading stays bounded whatever the hook's ``transcript_path`` names:
special files are refused, memory and work per call are capped, and a cursor is
never parsed from the middle of a line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import LIB  # noqa: E402
from loopwright.core import jsoncodec
from loopwright.state import transcript
from loopwright.state.transcript import FIRST_READ_WINDOW, Cursor, merge, read_increment, regular_size

MIB = 1024 * 1024
GIB = 1024 * MIB
MODEL = "claude-sonnet-4-5"
NOT_REGULAR = "transcript is not a regular file; not read"


def assistant(mid, text="x", usage=None, sidechain=False, tool=False):
    blocks = [{"type": "text", "text": text}]
    if tool:
        blocks.append({"type": "tool_use", "id": f"tu-{mid}", "name": "Bash", "input": {}})
    return {
        "type": "assistant",
        "isSidechain": sidechain,
        "message": {
            "id": mid,
            "model": MODEL,
            "role": "assistant",
            "content": blocks,
            "usage": usage or {"input_tokens": 10, "output_tokens": 5},
        },
    }


def user(text):
    return {"type": "user", "message": {"role": "user", "content": text}}


COMPACT = {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"}


def line(entry) -> bytes:
    return jsoncodec.dumps(entry) + b"\n"


def run_isolated(code: str, timeout: float = 300, measure: bool = False) -> dict:
    """Run ``code`` in a fresh interpreter, so a hang can be killed; it prints one JSON object.

    Linux carries the parent's peak RSS across exec into ru_maxrss (pytest's own would be
    measured), so with ``measure`` the code runs in a process forked from that interpreter,
    whose count starts afresh."""
    prelude = f"import sys, os, json, resource, time\nsys.path.insert(0, {str(LIB)!r})\n"
    if measure:
        prelude += (
            "pid = os.fork()\nif pid:\n    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
        )
    out = subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


PEAK_RSS = (
    "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "peak_mib = peak / (1024 * 1024) if sys.platform == 'darwin' else peak / 1024\n"
)


# --- special files --------------------------------------------------------------------------------


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    res = run_isolated(
        "from loopwright.state.transcript import Cursor, read_increment, regular_size\n"
        f"p = {str(fifo)!r}\n"
        "a = read_increment(p, Cursor(offset=0))\n"
        "b = read_increment(p, Cursor(), nonce='lw-x')\n"
        "print(json.dumps({'notes': a.notes + b.notes, 'offset': a.cursor.offset, 'size': "
        "regular_size(p)}))\n",
        timeout=120,  # generous: the fixed code returns at once, a regression hangs forever
    )
    assert res == {"notes": [NOT_REGULAR, NOT_REGULAR], "offset": 0, "size": None}


@pytest.fixture
def unix_socket():
    # AF_UNIX paths are short; tmp_path can be too long for one.
    d = tempfile.mkdtemp(prefix="lw")
    path = os.path.join(d, "s")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)
    yield path
    sock.close()
    os.unlink(path)
    os.rmdir(d)


@pytest.mark.parametrize("kind", ["dev-zero", "directory", "socket"])
def test_devices_directories_and_sockets_are_refused(kind, tmp_path, request):
    if kind == "dev-zero":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        path = "/dev/zero"
    elif kind == "directory":
        path = str(tmp_path)
    else:
        path = request.getfixturevalue("unix_socket")
    for cursor, nonce in ((Cursor(offset=0), None), (Cursor(offset=5), None), (Cursor(), "lw-x")):
        inc = read_increment(path, cursor, nonce=nonce)
        assert inc.notes == [NOT_REGULAR]
        assert not inc.usage and inc.bytes_read == 0 and inc.cursor.offset == cursor.offset
    assert regular_size(path) is None


def test_regular_size(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_bytes(b"abc\n")
    assert regular_size(str(f)) == 4
    assert regular_size(str(tmp_path)) is None
    assert regular_size(str(tmp_path / "missing")) is None
    assert regular_size(None) is None and regular_size("") is None
    assert regular_size(str(f) + "\0") is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert regular_size(str(fifo)) is None  # FIFO: refused before any open, so no wait


def test_tail_text_is_gone():
    assert not hasattr(transcript, "tail_text")


# --- the first read of a loop ---------------------------------------------------------------------


def sparse_gib(path: Path) -> int:
    """A 1 GiB transcript that is almost all hole: the nonce and an old message at the
    top, one message just before the last window, three messages at the very end."""
    tail = b"\n" + b"".join(line(assistant(f"t{i}", f"tail {i}")) for i in range(3))
    with open(path, "wb") as fh:
        fh.write(line(user("loop-nonce: lw-top")) + line(assistant("early")))
        fh.truncate(GIB)
        fh.seek(GIB - FIRST_READ_WINDOW - 10_000)
        fh.write(b"\n" + line(assistant("before-window")))
        fh.seek(GIB - len(tail))
        fh.write(tail)
    if os.stat(path).st_blocks * 512 > 64 * MIB:
        pytest.skip("the temporary directory does not keep files sparse")
    return GIB


def test_first_read_of_a_huge_transcript_costs_one_window(tmp_path):
    t = tmp_path / "t.jsonl"
    size = sparse_gib(t)
    res = run_isolated(
        "from loopwright.state.transcript import Cursor, read_increment\n"
        "t0 = time.monotonic()\n"
        f"inc = read_increment({str(t)!r}, Cursor(), nonce='lw-top')\n"
        "elapsed = time.monotonic() - t0\n"
        + PEAK_RSS
        + "print(json.dumps({'usage': inc.usage, 'final': inc.final_text, 'offset': inc.cursor.offset,\n"
        "  'bytes_read': inc.bytes_read, 'nonce_seen': inc.nonce_seen, 'rss_mib': peak_mib, 'seconds': "
        "elapsed}))\n",
        measure=True,
    )
    print(f"1 GiB first read: peak RSS {res['rss_mib']:.1f} MiB, {res['seconds']:.3f} s")
    assert res["usage"] == {
        MODEL: {
            "input_tokens": 30,
            "output_tokens": 15,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    }
    assert res["final"] == "tail 2"
    assert res["offset"] == size and res["bytes_read"] <= FIRST_READ_WINDOW
    assert not res["nonce_seen"]  # the nonce lies far outside the window
    assert res["rss_mib"] < 100


def test_reading_a_huge_transcript_from_the_start_stays_small(tmp_path):
    """From offset 0 the whole GiB is scanned over several capped calls; the
    gigabyte-long line of zeros is skipped without being held."""
    t = tmp_path / "t.jsonl"
    size = sparse_gib(t)
    res = run_isolated(
        "from loopwright.state.transcript import Cursor, merge, read_increment\n"
        f"inc = read_increment({str(t)!r}, Cursor(offset=0))\n"
        "calls = 1\n"
        f"while inc.cursor.offset < {size}:\n"
        f"    inc = merge(inc, read_increment({str(t)!r}, inc.cursor))\n"
        "    calls += 1\n"
        + PEAK_RSS
        + "print(json.dumps({'tokens': inc.usage['"
        + MODEL
        + "']['input_tokens'], 'calls': calls,\n"
        "  'bad': inc.bad_lines, 'rss_mib': peak_mib}))\n",
        measure=True,
    )
    assert res["tokens"] == 10 * 5  # early, before-window and the three at the end
    assert res["bad"] == 1 and res["calls"] == GIB // transcript.MAX_SCAN_BYTES
    assert res["rss_mib"] < 100


def test_first_read_ignores_a_nonce_before_the_window(tmp_path, monkeypatch):
    monkeypatch.setattr(transcript, "FIRST_READ_WINDOW", 2000)
    t = tmp_path / "t.jsonl"
    lines = [line(user("loop-nonce: lw-abc"))] + [line(assistant(f"old{i}", "o" * 100)) for i in range(20)]
    data = b"".join(lines)
    t.write_bytes(data)
    inc = read_increment(str(t), Cursor(), nonce="lw-abc")
    starts = [sum(map(len, lines[:i])) for i in range(len(lines))]
    inside = sum(1 for s in starts if s >= len(data) - 2000)
    assert not inc.nonce_seen and inc.bytes_read <= 2000 and inc.bad_lines == 0
    assert 0 < inside < 20 and inc.usage[MODEL]["input_tokens"] == 10 * inside


def test_first_read_with_the_nonce_line_straddling_the_window_starts_after_it(tmp_path, monkeypatch):
    monkeypatch.setattr(transcript, "FIRST_READ_WINDOW", 1000)
    t = tmp_path / "t.jsonl"
    after = line(assistant("a1")) + line(assistant("a2"))
    nonce_line = line(user("p" * 1000 + " loop-nonce: lw-abc"))  # the nonce inside the window, its line not
    t.write_bytes(line(assistant("old")) + nonce_line + after)
    inc = read_increment(str(t), Cursor(), nonce="lw-abc")
    assert inc.usage[MODEL]["input_tokens"] == 20 and inc.bytes_read < 1000 + len(nonce_line)
    assert inc.bad_lines == 0


# --- lines and offsets ----------------------------------------------------------------------------


def test_a_40_mib_line_is_skipped_and_the_next_line_counted(tmp_path):
    t = tmp_path / "t.jsonl"
    with open(t, "wb") as fh:
        fh.write(b'{"type":"assistant","junk":"')
        fh.writelines(b"a" * MIB for _ in range(40))
        fh.write(b'"}\n')
        fh.write(line(assistant("real", "after the long line")))
    inc = read_increment(str(t), Cursor(offset=0))
    assert inc.bad_lines == 1 and len(inc.notes) == 1 and "longer than" in inc.notes[0]
    assert inc.usage[MODEL]["input_tokens"] == 10 and inc.final_text == "after the long line"
    assert inc.cursor.offset == t.stat().st_size


def test_an_overlong_line_still_being_written_is_skipped_once(tmp_path, monkeypatch):
    monkeypatch.setattr(transcript, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(transcript, "_SCAN_CHUNK", 256)
    t = tmp_path / "t.jsonl"
    t.write_bytes(line(assistant("m1")) + b'{"type":"assistant","x":"' + b"a" * 3000)
    first = read_increment(str(t), Cursor(offset=0))
    assert first.bad_lines == 1 and first.usage[MODEL]["input_tokens"] == 10
    assert first.cursor.offset == t.stat().st_size  # resumes inside the long line, skipping on
    with open(t, "ab") as fh:
        fh.write(b"a" * 3000 + b'"}\n' + line(assistant("m2", "done")))
    second = read_increment(str(t), first.cursor)
    assert second.bad_lines == 0 and second.final_text == "done"
    assert second.usage[MODEL]["input_tokens"] == 10


def test_an_offset_inside_a_line_is_aligned_to_the_next_line(tmp_path):
    t = tmp_path / "t.jsonl"
    a, b = line(assistant("a", usage={"input_tokens": 1})), line(assistant("b", usage={"input_tokens": 100}))
    t.write_bytes(a + b)
    for offset in range(1, len(a) + 1):
        inc = read_increment(str(t), Cursor(offset=offset))
        assert inc.usage[MODEL]["input_tokens"] == 100, offset
        assert inc.bad_lines == 0 and inc.final_text == "x" and inc.cursor.offset == len(a + b)
    assert read_increment(str(t), Cursor(offset=0)).usage[MODEL]["input_tokens"] == 101


def test_a_loop_started_while_a_line_was_half_written_reads_from_the_next_line(tmp_path):
    t = tmp_path / "t.jsonl"
    half = line(assistant("before", usage={"input_tokens": 7}))
    t.write_bytes(line(user("hi")) + half[:30])
    cursor = Cursor(path=str(t), offset=regular_size(str(t)))
    with open(t, "ab") as fh:
        fh.write(half[30:] + line(assistant("after", "mine", usage={"input_tokens": 3})))
    inc = read_increment(str(t), cursor)
    assert inc.usage[MODEL]["input_tokens"] == 3 and inc.bad_lines == 0 and inc.final_text == "mine"


# --- work per call --------------------------------------------------------------------------------


def test_scan_cap_leaves_the_rest_for_the_next_call(tmp_path, monkeypatch):
    t = tmp_path / "t.jsonl"
    t.write_bytes(
        b"".join(
            line(assistant(f"m{i // 2}", f"text {i}", {"input_tokens": i, "output_tokens": 1}, tool=i == 7))
            for i in range(40)
        )
        + line(COMPACT)
    )
    whole = read_increment(str(t), Cursor(offset=0))
    monkeypatch.setattr(transcript, "MAX_SCAN_BYTES", 1000)
    monkeypatch.setattr(transcript, "_SCAN_CHUNK", 97)
    inc = read_increment(str(t), Cursor(offset=0))
    assert 0 < inc.cursor.offset <= 1000 and any("next stop" in n for n in inc.notes)
    calls = 1
    while inc.cursor.offset < t.stat().st_size:
        more = read_increment(str(t), inc.cursor)
        assert 0 < more.bytes_read <= 1000
        inc, calls = merge(inc, more), calls + 1
    assert calls > 5
    assert inc.usage == whole.usage and inc.final_blocks == whole.final_blocks
    assert inc.used_tool and inc.compacted and inc.bad_lines == 0


def test_a_line_longer_than_the_scan_cap_is_still_read(tmp_path, monkeypatch):
    monkeypatch.setattr(transcript, "MAX_SCAN_BYTES", 50)
    monkeypatch.setattr(transcript, "_SCAN_CHUNK", 16)
    t = tmp_path / "t.jsonl"
    t.write_bytes(line(assistant("m1", "one")) + line(assistant("m2", "two")))
    first = read_increment(str(t), Cursor(offset=0))
    assert first.final_text == "one" and first.cursor.offset == len(line(assistant("m1", "one")))
    second = read_increment(str(t), first.cursor)
    assert second.final_text == "two" and second.cursor.offset == t.stat().st_size


# --- any split, any chunk size --------------------------------------------------------------------

entry_st = st.one_of(
    # An assistant line: (continues the previous message?, text, usage, sidechain, tool use).
    st.tuples(
        st.booleans(),
        st.text('ab <>\n"', max_size=60),
        st.fixed_dictionaries({"input_tokens": st.integers(0, 500), "output_tokens": st.integers(0, 500)}),
        st.booleans(),
        st.booleans(),
    ),
    st.builds(user, st.text("ab", max_size=40)),
    st.just(COMPACT),
    st.just('{"type":"assistant", broken'),
    # Around the line cap used below, with and without the pre-filter's marker.
    st.builds(lambda n: {"type": "assistant", "pad": "z" * n}, st.integers(300, 700)),
    st.builds(lambda n: user("u" * n), st.integers(300, 700)),
)


def _lines(entries) -> bytes:
    out, n = [], 0
    for e in entries:
        if isinstance(e, tuple):  # message ids as Claude Code writes them: a message's lines are consecutive
            same, text, usage, sidechain, tool = e
            n += 0 if same else 1
            e = assistant(f"m{n}", text, usage, sidechain, tool)
        out.append(e.encode() + b"\n" if isinstance(e, str) else line(e))
    return b"".join(out)


@settings(max_examples=60, deadline=None)
@given(
    entries=st.lists(entry_st, min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 6000), max_size=6),
    chunk=st.integers(1, 64),
    cap=st.sampled_from([None, 40, 300]),
)
def test_any_split_and_chunk_size_reads_the_same_as_one_read(tmp_path_factory, entries, cuts, chunk, cap):
    data = _lines(entries)
    d = tmp_path_factory.mktemp("t")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(transcript, "MAX_LINE_BYTES", 400)
        (d / "whole.jsonl").write_bytes(data)
        whole = read_increment(str(d / "whole.jsonl"), Cursor(offset=0))
        mp.setattr(transcript, "_SCAN_CHUNK", chunk)
        if cap is not None:
            mp.setattr(transcript, "MAX_SCAN_BYTES", cap)
        grown = d / "grown.jsonl"
        grown.write_bytes(b"")
        inc = read_increment(str(grown), Cursor(offset=0))
        for cut in sorted({min(c, len(data)) for c in cuts}) + [len(data)] * len(data):
            grown.write_bytes(data[:cut])
            inc = merge(inc, read_increment(str(grown), inc.cursor))
            if inc.cursor.offset == len(data):
                break
    assert inc.cursor.offset == len(data)
    assert inc.usage == whole.usage
    assert inc.final_blocks == whole.final_blocks and inc.final_message_id == whole.final_message_id
    assert (inc.used_tool, inc.compacted, inc.bad_lines) == (
        whole.used_tool,
        whole.compacted,
        whole.bad_lines,
    )
