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
    # Below the built-in row: the built-in rates count until the user confirms the row.
    t = rates.table(rules.rates)
    assert t.source.startswith(rates.CLAUDE_MD_SOURCE) and "claude-sonnet-4-5" in t.source
    assert t.rates["claude-sonnet-4-5"] == rates.BUILT_IN["claude-sonnet-4-5"]
    accepted = {"claude-sonnet-4-5": rules.rates["claude-sonnet-4-5"]}
    t = rates.table(rules.rates, accepted)
    assert t.source == rates.CLAUDE_MD_SOURCE
    assert t.rates["claude-sonnet-4-5"] == {
        "input": 1.0,
        "output": 2.0,
        "cache_write": 0.5,
        "cache_read": 0.1,
    }
    assert t.rates["my-local-model"]["input"] == 0.0  # a model the built-in table does not know
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
    assert len(rules.redactions) == 2 and "RE2 cannot run it" in rules.problems[0]
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


# --- a committed CLAUDE.md cannot lower what the dollar ceiling counts ------------------------

SONNET = rates.BUILT_IN["claude-sonnet-4-5"]


def row(i, o, w, r):
    return {"input": i, "output": o, "cache_write": w, "cache_read": r}


def test_lowered_rows_are_those_below_the_built_in_row_their_model_matches():
    overrides = {
        "claude-sonnet-4-5": row(0, 0, 0, 0),
        "claude-opus-4-1-20250805": row(15, 75, 1, 1.5),  # a dated name matches the built-in row
        "claude-haiku-4-5": row(2, 10, 2.5, 0.2),  # higher: not lowered
        "house-model": row(0, 0, 0, 0),  # unknown to the built-in table: not lowered
    }
    low = rates.lowered(overrides)
    assert low == {
        "claude-sonnet-4-5": {"built_in": "claude-sonnet-4-5", "fields": list(rates.FIELDS)},
        "claude-opus-4-1-20250805": {"built_in": "claude-opus-4-1", "fields": ["cache_write"]},
    }


def test_a_lowered_row_counts_field_by_field_at_the_built_in_rates_unless_confirmed():
    overrides = {"claude-sonnet-4-5": row(1, 30, 0, 0.3)}
    usage = {"claude-sonnet-4-5-20250929": {"input_tokens": 1_000_000, "output_tokens": 1_000_000}}
    t = rates.table(overrides)
    assert t.rates["claude-sonnet-4-5"] == row(SONNET["input"], 30, SONNET["cache_write"], 0.3)
    assert t.cost(usage)[0] == pytest.approx(3 + 30)
    assert rates.table(overrides, {"claude-sonnet-4-5": row(1, 30, 0, 0.3)}).cost(usage)[0] == 31
    # A confirmation holds for the row as it was confirmed, not for whatever it says later.
    assert rates.table(overrides, {"claude-sonnet-4-5": row(2, 30, 0, 0.3)}).cost(usage)[0] == 33
    assert rates.table(overrides, None).cost(usage)[0] == 33


NAMES = st.sampled_from(list(rates.BUILT_IN) + ["house-model", "claude", "claude-sonnet"])
SUFFIXES = st.sampled_from(["", "-20250929", "-latest", "[1m]", "@20250929", "-x", "-4"])
RATES = st.floats(0, rates.MAX_RATE)


@given(
    st.dictionaries(
        st.tuples(NAMES, SUFFIXES).map("".join),
        st.fixed_dictionaries({f: RATES for f in rates.FIELDS}),
        max_size=6,
    ),
    st.dictionaries(
        st.tuples(st.sampled_from(list(rates.BUILT_IN)), SUFFIXES).map("".join),
        st.fixed_dictionaries({u: st.integers(0, 10_000_000) for u in rates.USAGE_TO_RATE}),
        min_size=1,
        max_size=4,
    ),
)
def test_project_rows_never_price_a_known_model_below_the_built_in_table(overrides, usage):
    """Whatever rows and names a CLAUDE.md uses (dated, tagged, longer prefixes), a model
    the built-in table knows costs at least its built-in price unless rows are confirmed."""
    assert rates.table(overrides).cost(usage)[0] >= rates.table(None).cost(usage)[0] * (1 - 1e-12)


def test_the_loop_json_schema_holds_confirmed_rates_to_the_same_range():
    from loopwright.core import schema

    spec = schema.LOOP.fields["accepted_rates"]
    assert tuple(spec.value.fields) == rates.FIELDS
    assert schema.valid(spec, {"m": row(0, 0, 0, rates.MAX_RATE)}) and schema.valid(spec, None)
    for bad in (rates.MAX_RATE * 1.001, -1, float("nan"), float("inf")):
        assert not schema.valid(spec, {"m": row(bad, 0, 0, 0)})
    assert not schema.valid(spec, {"m": {"input": 1}})


@pytest.mark.parametrize("value", ["1e308", "nan", "inf", "-inf", "-1", "1000.5", "Infinity"])
def test_rates_out_of_range_are_refused_with_a_line_number(tmp_path, value):
    rules = write_claude_md(
        tmp_path,
        "### Loop Cost Rates\n| model | input | output | cache_write | cache_read |\n|-|-|-|-|-|\n"
        f"| house-model | {value} | 1 | 1 | 1 |\n| ok-model | 0 | 1000 | 0 | 0 |\n",
    )
    assert set(rules.rates) == {"ok-model"}
    assert rules.problems == [
        "CLAUDE.md:4: rates must be numbers from 0 to 1000 (dollars per million tokens); skipped"
    ]


def test_rate_rows_and_model_names_are_bounded(tmp_path):
    from loopwright.state.claudemd import MAX_RATE_ROWS

    body = "".join(f"| m{i} | 1 | 1 | 1 | 1 |\n" for i in range(MAX_RATE_ROWS + 2))
    rules = write_claude_md(tmp_path, f"### Loop Cost Rates\n| {'x' * 201} | 1 | 1 | 1 | 1 |\n{body}")
    assert len(rules.rates) == MAX_RATE_ROWS
    assert rules.problems[0].startswith("CLAUDE.md:2: a Loop Cost Rates row needs a model name")
    assert [p.split(":")[1] for p in rules.problems[1:]] == [str(MAX_RATE_ROWS + 3), str(MAX_RATE_ROWS + 4)]
