"""The served models' registry has one writer (gateway/served/reconciler.py): no other module of the bundle calls a
write of `ModelRegistry` (read from the source with `ast`), so a model becomes served, fails or goes by one path."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.architecture.test_layers import BUNDLE, plant, python_files
from tests.conftest import ROOT

WRITES = ("opened", "served", "failed_to_serve", "dropped", "added", "removed")
WRITER = Path("gateway/served/reconciler.py")


def registry_writes(root: Path, places: tuple[str, ...]) -> list[str]:
    """Each call of a registry write (`<...>registry.<write>(...)`) outside the writer, as `path:line`."""
    found = []
    for place in places:
        for path in [root / place] if (root / place).is_file() else sorted((root / place).rglob("*.py")):
            if path.relative_to(root) == WRITER:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in WRITES
                    and "registry" in ast.unparse(node.func.value).lower()
                ):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_only_the_reconciler_writes_the_registry():
    assert python_files("gateway/served/reconciler.py")
    assert registry_writes(ROOT, BUNDLE) == []


def test_the_guard_sees_a_write_elsewhere(tmp_path):
    root = plant(
        tmp_path,
        {
            "gateway/engine.py": "def warm(self, info, q):\n    self.registry.served(info.name, info, q)\n",
            "gateway/served/reconciler.py": "def serve(self, info):\n    self._registry.served(info.name, info)\n",
        },
    )
    assert registry_writes(root, ("gateway",)) == ["gateway/engine.py:2"]
