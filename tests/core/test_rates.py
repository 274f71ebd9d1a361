"""Rate table, model matching, CLAUDE.md blocks and redaction."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright.core import rates
from loopwright.state import claudemd


@pytest.mark.parametrize(
    "model, key",
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("Claude-Sonnet-4-5[1m]", "claude-sonnet-4-5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("gpt-4o", None),
        ("claude-sonnet-45", None),
    ],
)
def test_model_names_match_the_longest_table_prefix(model, key):
    assert rates.table(None).match(model) == key


def test_cost_per_million_tokens():
    t = rates.table(None)
    usage = {
        "claude-sonnet-4-5-20250929": {
            "input_tokens": 1_000_000,
            "output_tokens": 100_000,
            "cache_creation_input_tokens": 200_000,
            "cache_read_input_tokens": 2_000_000,
        }
    }
    dollars, unknown = t.cost(usage)
    assert dollars == pytest.approx(3.0 + 1.5 + 0.75 + 0.6)
    assert unknown == []


def test_unknown_models_are_reported_and_priced_at_the_highest_rate():
    t = rates.table(None)
    dollars, unknown = t.cost({"mystery-model": {"input_tokens": 1_000_000}})
    assert unknown == ["mystery-model"]
    assert dollars == max(r["input"] for r in rates.BUILT_IN.values())


def write_claude_md(tmp_path, text):
    (tmp_path / "CLAUDE.md").write_text(text)
    return claudemd.load(tmp_path)


def test_claude_md_rates_override_the_built_in_table(tmp_path):
    rules = write_claude_md(
        tmp_path,
        """# Project

### Loop Cost Rates
| model | input | output | cache_write | cache_read |
|---|---|---|---|---|
| claude-sonnet-4-5 | 1.00 | 2.00 | 0.50 | 0.10 |
| my-local-model | $0 | $0 | 0 | 0 |

### Other
| x | 1 | 2 | 3 | 4 |
""",
    )
    assert rules.problems == []
    t = rates.table(rules.rates)
    assert t.source == rates.CLAUDE_MD_SOURCE
    assert t.rates["claude-sonnet-4-5"] == {
        "input": 1.0,
        "output": 2.0,
        "cache_write": 0.5,
        "cache_read": 0.1,
    }
    assert t.match("my-local-model") == "my-local-model"
    assert "x" not in t.rates  # rows under another heading are not rates
    assert t.rates["claude-opus-4-1"] == rates.BUILT_IN["claude-opus-4-1"]


def test_bad_rate_rows_are_reported_with_line_numbers_and_skipped(tmp_path):
    rules = write_claude_md(
        tmp_path,
        "### Loop Cost Rates\n| model | input | output | cache_write | cache_read |\n|--|--|--|--|--|\n| a "
        "| 1 | x | 1 | 1 |\n| b | 1 | 2 |\n| c | 1 | 2 | 3 | -4 |\n| d | 1 | 2 | 3 | 4 |\n",
    )
    assert set(rules.rates) == {"d"}
    assert [p.split(":")[1] for p in rules.problems] == ["4", "5", "6"]
    assert all(p.startswith("CLAUDE.md:") for p in rules.problems)


def test_no_claude_md_means_built_in(tmp_path):
    rules = claudemd.load(tmp_path)
    assert rules.rates == {} and rates.table(rules.rates).source == rates.BUILT_IN_SOURCE


def test_redaction_patterns_apply_to_nested_values(tmp_path):
    rules = write_claude_md(
        tmp_path,
        "### Loop Logging\n- redact: `sk-ant-[A-Za-z0-9_-]+`\n- redact: `(?i)password=\\S+`\n- redact: "
        "`([`\n",
    )
    assert len(rules.redactions) == 2 and "bad redaction pattern" in rules.problems[0]
    value = {
        "reason": "used key sk-ant-abc123_XY and Password=hunter2",
        "gates": [{"q": "sk-ant-zzz"}],
        "n": 3,
    }
    out = claudemd.redact(value, rules.redactions)
    assert out == {"reason": "used key [REDACTED] and [REDACTED]", "gates": [{"q": "[REDACTED]"}], "n": 3}


def test_claude_md_in_dot_claude_is_found(tmp_path):
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "CLAUDE.md").write_text("### Loop Logging\n- redact: `secret`\n")
    assert len(claudemd.load(tmp_path).redactions) == 1


@given(
    st.dictionaries(
        st.sampled_from(list(rates.BUILT_IN)),
        st.fixed_dictionaries({f: st.integers(0, 10_000_000) for f in rates.USAGE_TO_RATE}),
        max_size=5,
    )
)
def test_cost_is_additive_over_models(usage):
    t = rates.table(None)
    total, _ = t.cost(usage)
    parts = sum(t.cost({m: u})[0] for m, u in usage.items())
    assert total == pytest.approx(parts)
    assert total >= 0
