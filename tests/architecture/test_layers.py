"""Dependencies point one way: service.py -> gateway/ and runners/ -> models/, with config/ under all of
them and bento/ (packaging and operations) beside runners/; commands/ (the CLI) beside the servers, and the
installed `embento` package outside the bundle. No module imports itself through others (no circles), and the
gateway never reaches `models/inference/` (the code that runs models), even through another module. Inside the
gateway too: gateway/wire/ imports neither gateway/http/ nor gateway/jobs/, and nothing in gateway/ outside
gateway/http/ imports it. Read from the source with `ast`, so a lazy import inside a function, or
`importlib.import_module("name")`, counts as much as one at the top of a file."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pathspec import PathSpec

from tests.conftest import ROOT

# Each package, and the modules (or packages) it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "gateway": ("runners", "bento", "commands", "config.served"),
    "models": (
        "gateway",
        "runners",
        "bento",
        "commands",
        "config.served",
        "server_state",
        "shared_metrics",
        "bentoml",
        "_bentoml_impl",
        "_bentoml_sdk",
    ),
    "runners": ("gateway", "commands"),
    "bento": ("gateway", "runners", "commands"),
    "config": ("gateway", "runners", "bento", "commands", "models", "server_state"),
    # The state a running server's processes share (its files): below the gateway, the model services and bento/,
    # which reach it without reaching each other; above config/ alone.
    "server_state": ("gateway", "runners", "bento", "commands", "models", "config.served", "shared_metrics"),
    # The CLI builds (bento/), serves through a `bentoml serve` subprocess and stores models: it reads config/,
    # models/ (the kind registry, errors) and bento/, never the servers' code.
    "commands": ("gateway", "runners", "embento.cli"),
    # The installed package (client and entry point) is not the bundle: it reaches the bundle's `commands` only
    # by `importlib.import_module` once it has found the bundle (test_embento_reaches_the_bundle_by_commands_only).
    "embento": (
        "gateway",
        "runners",
        "bento",
        "commands",
        "config",
        "models",
        "server_state",
        "shared_metrics",
        "service",
    ),
}
# Every module of the bundle and the installed package; none imports the composition root, service.py (tests and
# bench/, which run or inspect it, may).
CODE = (*FORBIDDEN, "shared_metrics.py")
# Test and benchmark code: the suite, the benchmarks and the helpers they share (testkit/). None ships in the Bento,
# so nothing in the bundle or the installed package may import it.
NOT_SHIPPED = ("tests", "testkit", "bench")
# One adapter per client family; none reads another's fields, so none imports another (`gateway/wire/common.py`
# holds what they share). infinity's embedding answers ARE OpenAI's shape: that import is the one allowed.
FAMILIES = ("openai", "infinity", "cohere", "tei")
SHARED_FAMILY_MODULES = {"infinity": ("openai",)}
# One direction through the gateway. gateway/http/ (routes, middleware, the edge's wiring) is its top: no module of
# gateway/ outside it imports it (service.py, the composition root, does). wire/ (one adapter per client family)
# is below jobs/, whose batch lines its adapters answer. What they all answer with sits under them:
# gateway/answering.py (the answering path) and gateway/error_responses.py (statuses, error bodies, retry headers).
GATEWAY_TOP = "gateway/http"
GATEWAY_DIRECTION: dict[str, tuple[str, ...]] = {
    "gateway/wire": ("gateway.http", "gateway.jobs"),
    "gateway": ("gateway.http",),  # gateway/http/ itself apart
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


def python_files(place: str) -> list[Path]:
    path = ROOT / place
    return [path] if path.is_file() else sorted(path.rglob("*.py"))


def breaches(place: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in python_files(place)
        for module in sorted(imported_modules(path))
        if names(module, forbidden)
    ]


@pytest.mark.parametrize("folder", FORBIDDEN)
def test_imports_point_one_way(folder):
    assert breaches(folder, FORBIDDEN[folder]) == []


@pytest.mark.parametrize("place", CODE)
def test_nothing_imports_the_composition_root(place):
    assert breaches(place, ("service",)) == []


@pytest.mark.parametrize("place", (*CODE, "service.py"))
def test_the_bundle_imports_no_test_or_benchmark_code(place):
    assert breaches(place, NOT_SHIPPED) == []


def test_testkit_imports_neither_the_suite_nor_the_benchmarks():
    """Both import it: a benchmark runs without the test suite (or pytest) on the path."""
    assert breaches("testkit", ("tests", "bench", "pytest")) == []


@pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")  # BentoML 1.4 still names it so
def test_the_bentofile_includes_no_test_or_benchmark_code():
    """bentofile.yaml's `include`, read as BentoML reads it (gitwildmatch), picks no file of tests/, testkit/ or
    bench/."""
    bentofile = yaml.safe_load((ROOT / "bentofile.yaml").read_text())
    spec = PathSpec.from_lines("gitwildmatch", bentofile["include"])
    files = [path.relative_to(ROOT).as_posix() for folder in NOT_SHIPPED for path in (ROOT / folder).rglob("*")]
    assert files and [path for path in files if spec.match_file(path)] == []


@pytest.mark.parametrize("family", FAMILIES)
def test_a_client_familys_adapter_imports_no_other_familys(family):
    others = tuple(
        f"gateway.wire.{other}"
        for other in FAMILIES
        if other != family and other not in SHARED_FAMILY_MODULES.get(family, ())
    )
    assert breaches(f"gateway/wire/{family}.py", others) == []


def upward_imports(root: Path, place: str) -> list[str]:
    """The imports in `place` (a folder under `root`) that GATEWAY_DIRECTION forbids it; gateway/http/ apart."""
    return [
        f"{path.relative_to(root).as_posix()} imports {module}"
        for path in sorted((root / place).rglob("*.py"))
        if not path.is_relative_to(root / GATEWAY_TOP)
        for module in sorted(imported_modules(path))
        if names(module, GATEWAY_DIRECTION[place])
    ]


@pytest.mark.parametrize("place", GATEWAY_DIRECTION)
def test_one_direction_through_the_gateway(place):
    assert upward_imports(ROOT, place) == []


def import_module_calls(path: Path) -> list[tuple[str, bool]]:
    """Each `import_module(name)` call in `path`: the name, and whether it runs only inside a function."""
    tree = ast.parse(path.read_text())
    in_functions = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(function)
    }
    return [
        (ast.literal_eval(node.args[0]), id(node) in in_functions)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and called_name(node) == "import_module"
        and isinstance(node.args[0], ast.Constant)  # a name chosen at run time (`KindSpec.loader`) is no edge
    ]


def called_name(call: ast.Call) -> str:
    """`f` of `f(...)` or of `module.f(...)`."""
    return getattr(call.func, "attr", getattr(call.func, "id", ""))


def test_embento_reaches_the_bundle_by_commands_only():
    """`embento` imports no module of the bundle (FORBIDDEN); the one way in is `import_module("commands")`,
    called inside a function once the bundle is found and on the path."""
    assert [call for path in python_files("embento") for call in import_module_calls(path)] == [("commands", True)]


def test_config_settings_holds_no_bentoml():
    """The gateway and models/ read it."""
    assert [m for m in imported_modules(ROOT / "config" / "settings.py") if names(m, ("bentoml",))] == []


def test_models_package_has_no_bentoml_import():
    code = (
        "import sys, config.settings, models.kinds, models.scores, models.inference.text_encoder, "
        "models.inference.text_scorer, models.preprocessing.text_tokenizer, models.batching; "
        "print('bentoml' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_shared_metrics_import_none_of_the_packages():
    assert [m for m in imported_modules(ROOT / "shared_metrics.py") if names(m, tuple(FORBIDDEN))] == []


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph(root: Path, places: tuple[str, ...]) -> dict[str, set[str]]:
    """Each module under `places` and the modules among them it imports (`from a import b` names `a.b` when that
    is a module, else `a`); `import_module("name")` with a literal name counts."""
    files = {
        module_name(path, root): path
        for place in places
        for path in ([root / place] if (root / place).is_file() else sorted((root / place).rglob("*.py")))
    }

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in files.items():
        imported = imported_modules(path) | {module for module, _ in import_module_calls(path)}
        graph[name] = {target for module in imported if (target := known(module)) and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            members = []
            while not members or members[-1] != module:
                members.append(stack.pop())
            if len(members) > 1:
                found.append(sorted(members))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module the modules under `start` import, directly or through others."""
    seen = {name for name in graph if names(name, (start,))}
    todo = list(seen)
    while todo:
        for other in graph[todo.pop()] - seen:
            seen.add(other)
            todo.append(other)
    return seen


BUNDLE = ("service.py", "shared_metrics.py", *FORBIDDEN)


def test_no_module_imports_itself_through_others():
    assert circles(module_graph(ROOT, BUNDLE)) == []


def test_the_gateway_reaches_no_model_running_code():
    """The gateway prepares inputs (`models/preprocessing/`) and reads results; it never imports what runs models,
    so it starts without torch and cannot run a model by mistake."""
    assert sorted(m for m in reached(module_graph(ROOT, BUNDLE), "gateway") if names(m, ("models.inference",))) == []


def plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_guard_sees_a_circle_through_a_lazy_import(tmp_path):
    root = plant(
        tmp_path,
        {
            "models/kinds.py": "def load():\n    from models.loader import load\n",
            "models/loader.py": "from models.base import Row\n",
            "models/base.py": "from models import kinds\n",
            "models/free.py": "import models.base\n",
        },
    )
    assert circles(module_graph(root, ("models",))) == [["models.base", "models.kinds", "models.loader"]]


def test_the_guard_sees_the_gateway_reach_model_code_through_another_module(tmp_path):
    root = plant(
        tmp_path,
        {
            "gateway/engine.py": "from models.preprocessing.tokenizer import tokenize\n",
            "models/preprocessing/tokenizer.py": "import importlib\nimportlib.import_module('models.inference.x')\n",
            "models/inference/x.py": "import torch\n",
        },
    )
    graph = module_graph(root, ("gateway", "models"))
    assert [m for m in reached(graph, "gateway") if names(m, ("models.inference",))] == ["models.inference.x"]


def test_the_guard_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from runners.pool import ModelPool\n")
    assert names("runners.pool", ("runners",)) and "runners.pool" in imported_modules(module)


def test_the_guard_sees_a_wire_adapter_import_the_routes_or_the_jobs(tmp_path):
    root = plant(
        tmp_path,
        {
            "gateway/wire/batches.py": "import gateway.jobs.store\n",
            "gateway/wire/tei.py": "def route():\n    from gateway import http\n",
            "gateway/wire/openai.py": "from gateway.answering import answered\n",  # below wire/: allowed
        },
    )
    assert upward_imports(root, "gateway/wire") == [
        "gateway/wire/batches.py imports gateway.jobs.store",
        "gateway/wire/tei.py imports gateway.http",
    ]


def test_the_guard_sees_the_gateway_import_its_http_edge_from_below(tmp_path):
    root = plant(
        tmp_path,
        {
            "gateway/tenants/gate.py": "from gateway.http.errors import error_response\n",
            "gateway/jobs/answers.py": "from gateway.wire import openai\ndef answer():\n    import gateway.http.job\n",
            "gateway/http/assembly.py": "import gateway.http.errors\nimport gateway.jobs.store\n",  # the top: allowed
            "service.py": "import gateway.http.assembly\n",  # the composition root, outside gateway/: allowed
        },
    )
    assert upward_imports(root, "gateway") == [
        "gateway/jobs/answers.py imports gateway.http.job",
        "gateway/tenants/gate.py imports gateway.http.errors",
        "gateway/tenants/gate.py imports gateway.http.errors.error_response",
    ]


def test_the_registry_points_the_gateway_at_preparation_and_the_model_services_at_inference():
    """`KindSpec.preprocessor` is built in the gateway and `KindSpec.loader` on a model service, both by name
    (`importlib`, which the import graph cannot see): each must name a module on its side."""
    from models.kinds import KIND_SPECS

    for kind in KIND_SPECS.values():
        assert names(kind.preprocessor.partition(":")[0], ("models.preprocessing",)), kind.preprocessor
        assert names(kind.loader.partition(":")[0], ("models.inference",)), kind.loader
