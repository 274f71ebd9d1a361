"""The detached notifier a loop's hook or command starts (lib/loopwright/tick/notices.py):
the event and the notifiers as JSON on stdin; see lib/loopwright/runner/notify.py."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from loopwright.state.bytecode import use  # noqa: E402

use()  # bytecode from the plugin data directory's cache, never compiled from source
from loopwright.runner.notify import main  # noqa: E402

sys.exit(main(sys.stdin.buffer.read(1024 * 1024)))
