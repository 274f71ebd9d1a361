"""The ai-cli-task sub-commands' deterministic parts, one module per verb:

- taskmodule: locating a module, its .index.md and .lifecycle.json log, its state commits
- transition: the recorded status changes of plan, check, exec, report and cancel
- init (with undo): create the module, its branch or worktree, and the init commit
- commit: the exec phase's code commits
- merge (with mergeattempts): merge into the base branch, bounded and optionally verified
- report, cancel, status, annotate: the verbs of the same names

Each operation validates the module (taskdir), checks the state x command matrix
(lifecycle), writes ``.index.md`` atomically, keeps a small system log in
``.lifecycle.json``, and makes its state commit with the ai-cli-task convention
(gitops). Errors are TaskError with one line for the user.
"""
