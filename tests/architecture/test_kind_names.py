"""Kind names are spelled once, as the `Kind` literal of `config/kind_names.py`, and compared in one module only:
`models/kinds.py`, whose `KindSpec` says everything that follows from a kind. Anywhere else a branch on a kind
name, a table keyed by kind names or a `Literal` of them is a second copy of the registry that the next kind would
have to find. Read from the source with `ast`.

"embed", "rerank" and "classify" are also capability and route names, and "sparse" an output type: only
comparisons against a kind (a name, attribute or call ending in `kind`) count, and only tables keyed by kind
names alone, one of them a kind's name only (a table keyed by "embed" and "rerank" may be one per capability).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from models.kinds import KIND_SPECS, Kind, Output, ScoreMode
from tests.conftest import ROOT

KIND_NAMES = frozenset(get_args(Kind))
CAPABILITIES = frozenset(capability for spec in KIND_SPECS.values() for capability in spec.capabilities)
# Kind names that are also another vocabulary's words: capabilities, outputs, representations and score modes.
SHARED_WORDS = CAPABILITIES | frozenset(get_args(Output)) | frozenset(get_args(ScoreMode))
REGISTRY = Path("models/kinds.py")
KIND_NAMES_MODULE = Path("config/kind_names.py")  # the one `Literal` of the kind names
CHECKED = ("service.py", "gateway", "models", "runners", "bento", "commands", "config", "embento")


def checked_files() -> list[Path]:
    paths = []
    for entry in CHECKED:
        path = ROOT / entry
        paths += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return [p for p in paths if p.relative_to(ROOT) != REGISTRY]


def names_a_kind(node: ast.expr) -> bool:
    """`kind`, `info.kind`, `model_kind(cfg)`, `KINDS[name]`: an expression whose value is a kind."""
    if isinstance(node, ast.Call):
        return names_a_kind(node.func)
    if isinstance(node, ast.Subscript):
        return _name(node.value).lower().endswith("kinds")
    return _name(node).lower().endswith("kind")


def _name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def kind_literals(node: ast.expr) -> set[str]:
    """The kind names a literal string, tuple, list or set holds."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {
        item.value
        for item in items
        if isinstance(item, ast.Constant) and isinstance(item.value, str) and item.value in KIND_NAMES
    }


def keyed_by_kinds(node: ast.Dict) -> bool:
    keys = [key.value if isinstance(key, ast.Constant) else None for key in node.keys]
    return all(key in KIND_NAMES for key in keys) and any(key not in CAPABILITIES for key in keys)


def kind_comparisons(source: str, filename: str = "<source>") -> list[str]:
    """Each comparison of a kind with a kind name, and each table keyed by kind names: `line: code`."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(
                names_a_kind(a) and kind_literals(b) or names_a_kind(b) and kind_literals(a)
                for a, b in zip(sides, sides[1:])
            ):
                found.append(node)
        elif isinstance(node, ast.Dict) and keyed_by_kinds(node):
            found.append(node)
        elif isinstance(node, ast.Match) and names_a_kind(node.subject):
            found += [
                case.pattern
                for case in node.cases
                if isinstance(case.pattern, ast.MatchValue) and kind_literals(case.pattern.value)
            ]
    return [f"{node.lineno}: {ast.get_source_segment(source, node)}" for node in found]


def kind_name_literals(source: str, filename: str = "<source>") -> list[str]:
    """Each `Literal[...]` that spells out a kind name no other vocabulary uses (`SHARED_WORDS`): a second copy of
    `config.kind_names.Kind`."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if (
            isinstance(node, ast.Subscript)
            and _name(node.value) == "Literal"
            and kind_literals(node.slice) - SHARED_WORDS
        ):
            found.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def sites() -> dict[str, list[str]]:
    found = {}
    for path in checked_files():
        if comparisons := kind_comparisons(path.read_text(), str(path)):
            found[str(path.relative_to(ROOT))] = comparisons
    return found


def test_kind_names_are_compared_in_the_registry_only():
    assert sites() == {}


def test_kind_names_are_spelled_out_once():
    copies = {
        str(path.relative_to(ROOT)): literals
        for path in [*checked_files(), ROOT / REGISTRY]
        if path.relative_to(ROOT) != KIND_NAMES_MODULE and (literals := kind_name_literals(path.read_text()))
    }
    assert copies == {}
    assert kind_name_literals((ROOT / KIND_NAMES_MODULE).read_text()) != []


def test_the_guard_sees_a_copy_of_the_kind_literal():
    planted = 'ModelKind = Literal["auto", "embed", "clip"]\nTask = Literal["embed", "rerank"]\n'
    assert kind_name_literals(planted) == ['1: Literal["auto", "embed", "clip"]']


def test_the_guard_sees_each_form():
    source = """
if kind == "sparse": pass
if info.kind in ("embed", "clip"): pass
if "colpali" != self.kind: pass
if model_kind(cfg) not in ["rerank"]: pass
if KINDS[name] == "clap": pass
TABLE = {"embed": 1, "sparse": 2}
match cfg.kind:
    case "classify": pass
"""
    assert len(kind_comparisons(source)) == 7


def test_the_guard_leaves_capabilities_routes_and_outputs_alone():
    source = """
if capability == "embed": pass
if "rerank" in info.capabilities: pass
if spec.output == "sparse": pass
if kind == other_kind: pass
ROUTES = {"embed": "/v1/embeddings", "classify": "/classify", "similarity": "/similarity"}
BODIES = {"embed": {"input": "a"}, "rerank": {"query": "q"}, "classify": {"input": "b"}}
"""
    assert kind_comparisons(source) == []
