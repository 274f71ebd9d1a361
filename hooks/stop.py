"""Stop hook: hand the event to loopwright's router (see lib/loopwright/entry.py)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from loopwright.events.entry import stop  # noqa: E402

sys.exit(stop())
