"""Property tests take no clock: no deadline per example and no health check on the time it
takes to generate one, for every test (the profile in tests/conftest.py) and none set again
by a test's own settings. A busy machine, or xdist's workers beside each other, would
otherwise fail them."""

import re

from hypothesis import HealthCheck, settings

from conftest import TESTS


def test_the_profile_sets_no_deadline_and_no_slowness_check():
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check


def test_no_test_sets_a_deadline_of_its_own():
    timed = re.compile(r"deadline\s*=\s*(?!None\b)[^\s,)]")
    found = [
        f"{path.relative_to(TESTS)}:{n}"
        for path in TESTS.rglob("test_*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "@settings(" in line and timed.search(line)
    ]
    assert found == []
