"""The one base of every error a user can fix. Its message is a single line naming
the problem and the fix; the CLI prints it, the slash commands refuse with it."""


class UserError(Exception):
    pass


class UnsafePath(UserError):
    """A path loopwright will not use: a symlink on the way, or a place outside the project."""


class LoopError(UserError):
    """A user-facing problem with a loop; the message is one line naming the fix."""
