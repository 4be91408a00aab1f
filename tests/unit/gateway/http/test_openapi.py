"""`OpenApiDocument`: BentoML's `/docs.json` with Embento's `info` and the admin routes, nothing else touched."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.http.admin import ADMIN_PATHS, with_admin_routes
from gateway.http.get_routes import VERSION
from gateway.http.openapi import OpenApiDocument, with_embento_info

# The parts of BentoML 1.4's document the edits meet (`_bentoml_sdk.service.openapi.generate_spec`).
BENTOMLS = {
    "openapi": "3.0.2",
    "info": {
        "title": "Embento",
        "description": "# Embento:dev\n\n[![pypi_status](https://img.shields.io/badge/BentoML-1.4.40-informational)]",
        "version": "None",
        "contact": {"name": "BentoML Team", "email": "contact@bentoml.com"},
    },
    "paths": {"/v1/embeddings": {"post": {}}},
    "tags": [{"name": "Service APIs"}],
}


def client(status: int = 200) -> TestClient:
    async def document(request):
        return JSONResponse(BENTOMLS, status_code=status)

    app = Starlette(routes=[Route("/docs.json", document), Route("/other.json", document)])
    return TestClient(OpenApiDocument(app, edits=(with_admin_routes, with_embento_info)))


def test_the_document_says_embentos_name_version_and_description_and_lists_the_admin_routes():
    schema = client().get("/docs.json").json()
    info = schema["info"]
    assert (info["title"], info["version"]) == ("Embento", VERSION) and "contact" not in info
    assert "BentoML" not in info["description"] and "OpenAI" in info["description"]
    assert set(schema["paths"]) == {"/v1/embeddings", *ADMIN_PATHS}  # BentoML's paths kept, the admin's added
    assert schema["openapi"] == "3.0.2"


def test_other_paths_and_failed_answers_pass_as_they_are():
    assert client().get("/other.json").json() == BENTOMLS
    failed = client(500).get("/docs.json")
    assert failed.status_code == 500 and failed.json() == BENTOMLS
