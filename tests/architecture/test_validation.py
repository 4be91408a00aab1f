"""Every check of a request is in `gateway/validation/`, or in a module that its docstring lists among those that
keep checks because they alone can make them (fetching a URL, decoding media, a tokenizer's counts, the job store's
transaction). A check of a request is a `raise` of a request error (`InvalidRequest` and its subclasses,
`RequestTooLarge`: the 4xx of a malformed or refused request). Read from the source with `ast`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from config import errors
from tests.conftest import ROOT

REQUEST_ERRORS = frozenset(
    name
    for name, value in vars(errors).items()
    if isinstance(value, type) and issubclass(value, (errors.InvalidRequest, errors.RequestTooLarge))
)
CHECKED = ("service.py", "gateway", "models", "runners", "bento", "config")
VALIDATION = "gateway/validation/"
MAP = Path("gateway/validation/__init__.py")
KEPT_SECTION = "The checks that stay where they are"
# A module (`gateway/inputs/fetch.py`) or a folder two levels down (`models/preprocessing/`), as the map names them.
LISTED = re.compile(r"`((?:gateway|models)/(?:\w+/)*\w+\.py|(?:gateway|models)/\w+/)`")


def request_raises(source: str) -> int:
    """How many `raise` statements of a request error the module holds (`raise InvalidRequest(...)`,
    `raise errors.InvalidRequest(...)`)."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = (
                raised.id if isinstance(raised, ast.Name) else raised.attr if isinstance(raised, ast.Attribute) else ""
            )
            count += name in REQUEST_ERRORS
    return count


def kept_elsewhere(root: Path) -> list[str]:
    """The modules and folders the map lists as keeping checks, from its docstring's section on them."""
    docstring = ast.get_docstring(ast.parse((root / MAP).read_text())) or ""
    return LISTED.findall(docstring.partition(KEPT_SECTION)[2])


def unlisted(root: Path, kept: list[str]) -> list[str]:
    """The modules that check requests outside `gateway/validation/` and are not listed as keeping checks."""
    found = []
    for entry in CHECKED:
        path = root / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []:
            name = file.relative_to(root).as_posix()
            if name.startswith(VALIDATION) or any(name == k or (k.endswith("/") and name.startswith(k)) for k in kept):
                continue
            if request_raises(file.read_text()):
                found.append(name)
    return found


def test_every_request_check_is_in_validation_or_in_a_module_it_lists():
    assert unlisted(ROOT, kept_elsewhere(ROOT)) == []


def test_every_module_the_map_lists_exists():
    kept = kept_elsewhere(ROOT)
    assert "gateway/inputs/fetch.py" in kept and "models/preprocessing/" in kept
    assert [name for name in kept if not (ROOT / name).exists()] == []


def test_the_guard_sees_a_check_outside_validation(tmp_path):
    (tmp_path / MAP).parent.mkdir(parents=True)
    (tmp_path / MAP).write_text(f'"""The map.\n\n{KEPT_SECTION}:\n\n- `gateway/inputs/fetch.py`: fetching.\n"""\n')
    planted = "from config import errors\n\n\ndef f():\n    raise errors.InvalidRequest('no', param='x')\n"
    for name in ("gateway/wire/family.py", "gateway/validation/bodies.py", "gateway/inputs/fetch.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(planted)
    (tmp_path / "gateway/engine.py").write_text("from config import errors\n\nraise errors.NotReady('later')\n")
    assert unlisted(tmp_path, kept_elsewhere(tmp_path)) == ["gateway/wire/family.py"]
