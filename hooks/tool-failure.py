"""PostToolUseFailure hook: auto-backprop for failing test runs (see lib/loopwright/events/entry.py)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from loopwright.state.bytecode import use  # noqa: E402

use()  # bytecode from the plugin data directory's cache, never compiled from source
from loopwright.events.entry import tool_failure  # noqa: E402

sys.exit(tool_failure())
