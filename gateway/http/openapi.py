"""`/docs.json`: BentoML's OpenAPI document of the gateway, with what BentoML cannot give it. BentoML writes its
`info` from a Bento (the version `"None"` outside one) and its own README (badges, chat links) for the
description; the edits here give Embento's name, version and description, and add the routes that are not
BentoML's (the admin routes: `gateway.http.admin.with_admin_routes`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.http.get_routes import VERSION

Schema = dict[str, Any]
DOCUMENT_PATH = "/docs.json"
TITLE = "Embento"
DESCRIPTION = (
    "Embedding, reranking and classification models behind the APIs their clients already speak: OpenAI's "
    "`/v1/embeddings`, Cohere's embed and rerank, Voyage's, text-embeddings-inference's and infinity's routes, "
    "each with its own request and error shapes. Every route takes an optional `model` (`GET /v1/models` lists "
    "them) and, when API keys are set, `Authorization: Bearer <key>`. The reference with examples is the "
    "project's docs/api.md."
)


def with_embento_info(schema: Schema) -> Schema:
    """Embento's own `info`, in place of BentoML's (and its BentoML contact)."""
    schema["info"] = {"title": TITLE, "version": VERSION, "description": DESCRIPTION}
    return schema


class OpenApiDocument:
    """GET `/docs.json` with `edits` applied, in order, to BentoML's document; any other request, or an answer
    other than a 200, passes as it is."""

    def __init__(self, app: ASGIApp, edits: Sequence[Callable[[Schema], Schema]]) -> None:
        self.app = app
        self.edits = edits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != DOCUMENT_PATH or scope["method"] != "GET":
            return await self.app(scope, receive, send)
        start: Message = {}
        body = b""

        async def held(message: Message) -> None:
            nonlocal start, body
            if message["type"] == "http.response.start":
                start = message
            else:
                body += message.get("body", b"")

        await self.app(scope, receive, held)
        if start.get("status") != 200:
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return
        schema = json.loads(body)
        for edit in self.edits:
            schema = edit(schema)
        await JSONResponse(schema)(scope, receive, send)
