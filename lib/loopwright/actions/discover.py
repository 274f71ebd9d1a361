"""``loopwright discover``: what this machine and project offer a coding loop.

Writes ``.loopwright/capabilities.json``: the command-line tools on PATH that
matter to a loop (version control, the GitHub CLI, test runners, package
managers, build tools), the test commands the project's own files suggest, and
the MCP servers configured for the project (``.mcp.json``) or the user
(``~/.claude.json``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from loopwright.state import loops, store
from loopwright.state.lock import now_iso

TOOLS = {
    "vcs": ["git", "gh", "glab"],
    "test": [
        "pytest",
        "tox",
        "nox",
        "jest",
        "vitest",
        "mocha",
        "go",
        "cargo",
        "rspec",
        "phpunit",
        "ctest",
        "dotnet",
        "mvn",
        "gradle",
    ],
    "package": ["pip", "uv", "poetry", "pipenv", "npm", "yarn", "pnpm", "bun", "npx", "bundle", "composer"],
    "build": ["make", "cmake", "ninja", "docker", "bazel", "just"],
    "language": ["python3", "node", "deno", "ruby", "java", "rustc", "gcc", "clang"],
    "lint": ["ruff", "mypy", "eslint", "prettier", "black", "shellcheck"],
}


def _project_tests(project: Path) -> list[str]:
    """Test commands the project's files point at."""
    found = []
    if (
        (project / "pytest.ini").exists()
        or (project / "conftest.py").exists()
        or (project / "tests").is_dir()
        and any(project.glob("tests/test_*.py"))
    ):
        found.append("pytest")
    pyproject = project / "pyproject.toml"
    if (
        pyproject.exists()
        and "[tool.pytest" in pyproject.read_text(errors="replace")
        and "pytest" not in found
    ):
        found.append("pytest")
    pkg = project / "package.json"
    if pkg.exists():
        try:
            if "test" in (json.loads(pkg.read_text()).get("scripts") or {}):
                found.append("npm test")
        except ValueError:
            pass
    if (project / "go.mod").exists():
        found.append("go test ./...")
    if (project / "Cargo.toml").exists():
        found.append("cargo test")
    makefile = project / "Makefile"
    if makefile.exists() and any(
        line.startswith("test:") for line in makefile.read_text(errors="replace").splitlines()
    ):
        found.append("make test")
    return found


def _mcp_servers(project: Path) -> list[dict]:
    servers = []
    sources = [
        (project / ".mcp.json", "project .mcp.json", None),
        (Path.home() / ".claude.json", "user ~/.claude.json", str(project)),
    ]
    for path, label, project_key in sources:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        blocks = [data.get("mcpServers")]
        if project_key and isinstance(data.get("projects"), dict):
            blocks.append((data["projects"].get(project_key) or {}).get("mcpServers"))
        for block in blocks:
            if not isinstance(block, dict):
                continue
            for name, spec in block.items():
                spec = spec if isinstance(spec, dict) else {}
                servers.append(
                    {
                        "name": name,
                        "source": label,
                        "type": spec.get("type") or ("stdio" if spec.get("command") else "unknown"),
                        "command": spec.get("command"),
                        "url": spec.get("url"),
                    }
                )
    return servers


def discover(state: Path) -> dict:
    project = state.parent
    tools = {group: {name: shutil.which(name) for name in names} for group, names in TOOLS.items()}
    caps = {
        "generated_at": now_iso(),
        "project": str(project),
        "cli_tools": tools,
        "available": sorted(name for group in tools.values() for name, path in group.items() if path),
        "project_test_commands": _project_tests(project),
        "mcp_servers": _mcp_servers(project),
    }
    loops.ensure_ignored(state)
    store.write_json(state / "capabilities.json", caps)
    return caps
