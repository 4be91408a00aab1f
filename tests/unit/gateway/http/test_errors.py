"""`ErrorBodies` on bodies BentoML cannot read: each 400 says what is wrong with the body (empty, a byte order
mark, a lone surrogate, not UTF-8, not JSON) without quoting it, in the route's shape. The route below answers
as BentoML 1.4's does (its JSON serde, its 400 body); the session server's test_errors.py sends the same bodies."""

from __future__ import annotations

import pytest
from _bentoml_impl.serde import JSONSerde, Payload
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.http.errors import ErrorBodies


class Body(BaseModel):
    input: str


async def bentoml_route(request: Request) -> JSONResponse:
    """BentoML's parsing of a JSON body (an empty one read as `{}`) and its answer to a validation error."""
    try:
        JSONSerde().deserialize_model(Payload((await request.body(),)), Body)
    except ValidationError as exc:
        detail = exc.errors(include_context=False, include_input=False)
        return JSONResponse({"error": f"{exc.error_count()} validation error", "detail": detail}, status_code=400)
    return JSONResponse({"ok": True})


CLIENT = TestClient(
    ErrorBodies(
        Starlette(routes=[Route(path, bentoml_route, methods=["POST"]) for path in ("/v1/embeddings", "/embed")]),
        shapes={"/embed": "tei"},
    )
)
BODIES = [
    pytest.param(b"", "the request body is empty", id="empty"),
    pytest.param(b'\xef\xbb\xbf{"input": "private"}', "starts with a UTF-8 byte order mark", id="bom"),
    pytest.param(b'{"input": "private \\ud800"}', "lone surrogate", id="lone-leading-surrogate"),
    pytest.param(b'{"input": "private \\udc00 x"}', "lone surrogate", id="lone-trailing-surrogate"),
    pytest.param(b'{"input": "private \xff"}', "not valid UTF-8", id="not-utf-8"),
    pytest.param(b'{"input": ["private",', "not valid JSON: EOF while parsing", id="cut-short"),
]


@pytest.mark.parametrize(("body", "says"), BODIES)
def test_an_unreadable_body_is_told_what_is_wrong_with_it_in_the_routes_shape(body, says):
    headers = {"content-type": "application/json"}
    openai = CLIENT.post("/v1/embeddings", content=body, headers=headers)
    assert openai.status_code == 400 and says in openai.json()["error"]["message"], openai.text
    assert openai.json()["error"]["param"] is None and "private" not in openai.text
    tei = CLIENT.post("/embed", content=body, headers=headers)
    assert tei.status_code == 400 and says in tei.json()["error"] and "private" not in tei.text, tei.text


def test_a_missing_field_of_a_body_sent_is_still_named():
    error = CLIENT.post("/v1/embeddings", json={"other": 1}).json()["error"]
    assert error["message"] == "input: Field required" and error["param"] == "input"
