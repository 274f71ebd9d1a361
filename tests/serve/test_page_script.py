"""The page's one script is put together from several modules (page.py, fleetlist.py,
fleetrows.py): a name declared twice would silently replace the other's function, so each is
declared once; and the script parses (checked with node, when it is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter

import pytest

from loopwright.serve import page

# Top-level declarations (the modules' scripts start theirs at the line's start): a function's
# name, and each name a const, let or var line declares.
FUNCTION = re.compile(r"^(?:async\s+)?function\s+(\w+)", re.M)
BINDING = re.compile(r"^(?:const|let|var)\s+(.*)$", re.M)


def script() -> str:
    return page.render("csrf").split("<script>", 1)[1].split("</script>", 1)[0]


def declared(text: str) -> Counter:
    names = Counter(FUNCTION.findall(text))
    for line in BINDING.findall(text):
        depth, names_here, word = 0, [], ""
        for c in line:  # the names before each "=" at the top of the line's brackets
            depth += c in "([{"
            depth -= c in ")]}"
            if depth == 0 and c == "=" and word.strip():
                names_here.append(word.strip().split()[-1])
            word = "" if depth == 0 and c == "," else word + c
        names.update(n for n in names_here if n.isidentifier())
    return names


def test_every_name_is_declared_once():
    names = declared(script())
    assert names["fleet"] == 1 and names["renderFleet"] == 1 and names["ftlMore"] == 1
    assert [n for n, k in names.items() if k > 1] == []


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to parse the script")
def test_the_script_parses(tmp_path):
    path = tmp_path / "page.js"
    path.write_text(script())
    done = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
