# Shared by the launchers: choose the Python interpreter.
# Order: $LOOPWRIGHT_PYTHON, the plugin's own virtual environment (made by the
# SessionStart hook under the plugin data directory), then python3 on PATH.
LW_PY=
if [ -n "${LOOPWRIGHT_PYTHON:-}" ]; then
  LW_PY=$LOOPWRIGHT_PYTHON
else
  # Hooks get CLAUDE_PLUGIN_DATA; the agent's Bash commands get LOOPWRIGHT_DATA
  # (exported by the SessionStart hook) or fall back to the default data path.
  for lw_py in "${CLAUDE_PLUGIN_DATA:-/nonexistent}/venv/bin/python" \
               "${LOOPWRIGHT_DATA:-/nonexistent}/venv/bin/python" \
               "${HOME:-/nonexistent}"/.claude/plugins/data/loopwright*/venv/bin/python; do
    if [ -x "$lw_py" ]; then
      LW_PY=$lw_py
      break
    fi
  done
  [ -n "$LW_PY" ] || LW_PY=$(command -v python3 2>/dev/null || true)
fi
