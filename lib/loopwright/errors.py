"""The one base of every error a user can fix. Its message is a single line naming
the problem and the fix; the CLI prints it, the slash commands refuse with it."""


class UserError(Exception):
    pass
