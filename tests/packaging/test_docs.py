"""The docs cover what the code has: every setting, every route; the README stays short; links resolve."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from config.settings import EmbentoConfig, ImageSettings, ModelConfig, load_config
from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = (
    "api.md",
    "configuration.md",
    "models.md",
    "deployment.md",
    "operations.md",
    "architecture.md",
    "benchmarks.md",
    "bulk-jobs.md",
    "tenants.md",
)
README_MAX_BYTES = 12 * 1024
LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)")


def test_configuration_md_is_generated_from_the_configuration_object():
    result = subprocess.run(
        [sys.executable, str(DOCS / "make_configuration.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    text = (DOCS / "configuration.md").read_text()
    for model in (EmbentoConfig, ModelConfig, ImageSettings):
        for name, field in model.model_fields.items():
            assert f"| `{name}` |" in text, name
            assert field.description, f"{model.__name__}.{name} has no description to document it"


@pytest.mark.server
def test_every_route_is_in_api_md(client):
    from gateway.http.admin import admin_routes
    from gateway.http.get_routes import get_routes
    from gateway.served.models import ServedModels
    from gateway.startup.lifecycle import Lifecycle
    from gateway.tenants.keys import Keys

    api = (DOCS / "api.md").read_text()
    documented = set(re.findall(r"`(GET|POST|HEAD|PUT|DELETE) (/[^`\s]*)`", api))
    openapi = client.get("/docs.json").json()["paths"]
    served = {(method.upper(), path) for path, methods in openapi.items() for method in methods}
    config = load_config({}, cwd=ROOT / "tests")
    models = ServedModels(config)
    routes = [
        *get_routes(config, Lifecycle(models.registry), models),
        *admin_routes(config, models.admin, models.additions, Keys((), None)),
    ]
    served |= {(method, _documented(route.path)) for route in routes for method in route.methods if method != "HEAD"}
    assert served - documented == set(), "routes the server has that docs/api.md does not"


def test_the_readme_is_short_and_every_link_resolves():
    readme = ROOT / "README.md"
    assert readme.stat().st_size <= README_MAX_BYTES
    for page in [readme, *(DOCS / name for name in PAGES)]:
        assert page.is_file(), page
        for target in LINK.findall(page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
    linked = set(LINK.findall(readme.read_text()))
    assert {f"docs/{name}" for name in PAGES} <= linked, "the README links every docs page"


def _documented(path: str) -> str:
    """A Starlette path as docs/api.md writes it: `{name}`, not `{name:path}`."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


@pytest.mark.server
def test_the_openapi_document_is_embentos(client):
    """`/docs.json` has Embento's name, the installed package's version and its own description, not BentoML's
    (its badges, its chat links, `"None"` for a version outside a Bento)."""
    from importlib.metadata import version

    from gateway.http.openapi import DESCRIPTION

    info = client.get("/docs.json").json()["info"]
    assert info == {"title": "Embento", "version": version("embento"), "description": DESCRIPTION}
