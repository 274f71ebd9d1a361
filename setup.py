"""The one build step pyproject.toml cannot say: the Claude Code plugin goes into the wheel.

A checkout is the plugin (``claude --plugin-dir .``, or added as a marketplace), so its files
stay where Claude Code looks for them. A wheel gets a copy of them as package data in
``loopwright/plugin/``, laid out as the checkout is: the manifest, ``bin/loopwright``, the
hooks, commands, skills and the requirements files the SessionStart hook reads, and the
package again in ``lib/loopwright``, because the hooks and the launcher import the package from
``<plugin>/lib``, found relative to themselves (their fast path reads nothing else).
``lib/loopwright/state/plugindir.py`` finds that copy when the package runs installed.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN = (
    ".claude-plugin",
    "bin",
    "commands",
    "hooks",
    "skills",
    "requirements.txt",  # what the SessionStart hook installs into the plugin's own venv
    "requirements-fleet.txt",
)
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


class BuildWithPlugin(build_py):
    """build_py, then the plugin copied into the built package (modes kept: the hooks and the
    launcher must stay executable)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install runs from this checkout, which is the plugin itself
        package = os.path.join(self.build_lib, "loopwright")
        plugin = os.path.join(package, "plugin")
        shutil.rmtree(plugin, ignore_errors=True)  # a build directory left from an earlier build
        os.makedirs(plugin)
        for name in PLUGIN:
            source, target = os.path.join(HERE, name), os.path.join(plugin, name)
            if os.path.isdir(source):
                shutil.copytree(source, target, ignore=SKIP)
            else:
                shutil.copy2(source, target)
        shutil.copytree(
            package,
            os.path.join(plugin, "lib", "loopwright"),
            ignore=lambda folder, names: SKIP(folder, names) | ({"plugin"} if folder == package else set()),
        )


setup(cmdclass={"build_py": BuildWithPlugin})
