"""Dependencies point one way: service.py -> gateway/ and services/ -> models/, with config/ under all of
them and bento/ (packaging and operations) beside services/. Read from the source with `ast`, so a lazy
import inside a function counts as much as one at the top of a file."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Each package, and the modules (or packages) it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "gateway": ("services", "bento", "commands", "config.served"),
    "models": ("gateway", "services", "bento", "commands", "config.served", "config.server_files", "shared_metrics",
               "bentoml", "_bentoml_impl", "_bentoml_sdk"),
    "services": ("gateway", "commands"),
    "bento": ("gateway", "services", "commands"),
    "config": ("gateway", "services", "bento", "commands"),
}


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from config import served`
    return modules


def names(module: str, forbidden: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in forbidden)


def breaches(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{path.relative_to(ROOT)} imports {module}"
            for path in sorted((ROOT / folder).rglob("*.py"))
            for module in sorted(imported_modules(path)) if names(module, forbidden)]


@pytest.mark.parametrize("folder", FORBIDDEN)
def test_imports_point_one_way(folder):
    assert breaches(folder, FORBIDDEN[folder]) == []


def test_config_settings_holds_no_bentoml():
    """The gateway and models/ read it."""
    assert [m for m in imported_modules(ROOT / "config" / "settings.py") if names(m, ("bentoml",))] == []


def test_models_package_has_no_bentoml_import():
    code = "import sys, config.settings, models.kinds, models.scores, models.text_encoder, models.text_scorer, " \
           "models.text_tokenizer, models.batching; print('bentoml' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_shared_metrics_import_none_of_the_packages():
    assert [m for m in imported_modules(ROOT / "shared_metrics.py") if names(m, tuple(FORBIDDEN))] == []


def test_the_guard_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from services.pool import ModelPool\n")
    assert names("services.pool", ("services",)) and "services.pool" in imported_modules(module)
