"""The framework's floors for bench/gateway_floor.py: two servers that answer OpenAI's embeddings body with one
constant 384-float vector per input and do nothing else.

- `EchoBento`: a BentoML 1.4 `@bentoml.api` service with pydantic bodies (`bentoml serve
  bench.echo_services:EchoBento`), the layer Embento's gateway routes run on. The same service also answers
  at `ANSWER_AS_RESPONSE` (the API writes its own orjson `Response`, as Embento's routes do) and at `MOUNTED`
  (the bare route below, served from the ASGI app BentoML mounts): what leaving BentoML's IO descriptors for
  the hot routes would save.
- `bare_app`: Starlette + orjson under uvicorn (`uvicorn bench.echo_services:bare_app --http httptools --loop
  uvloop`), what an ASGI route costs without BentoML.
"""

from __future__ import annotations

import bentoml
import orjson
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

VECTOR = [0.05103103] * 384
PATH = "/v1/embeddings"
ANSWER_AS_RESPONSE = "/response" + PATH
MOUNTED = "/mounted" + PATH


class EchoRequest(BaseModel):
    model: str
    input: str | list[str]


class EchoEmbedding(BaseModel):
    object: str = "embedding"
    index: int
    embedding: list[float]


class EchoUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EchoResponse(BaseModel):
    object: str = "list"
    data: list[EchoEmbedding]
    model: str
    usage: EchoUsage


def inputs_of(body: str | list[str]) -> list[str]:
    return [body] if isinstance(body, str) else body


def answer_bytes(model: str, count: int) -> Response:
    answer = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": VECTOR} for i in range(count)],
        "model": model,
        "usage": {"prompt_tokens": count, "total_tokens": count},
    }
    return Response(orjson.dumps(answer), media_type="application/json")


async def bare_embeddings(request: Request) -> Response:
    body = orjson.loads(await request.body())
    return answer_bytes(body["model"], len(inputs_of(body["input"])))


async def ready(_: Request) -> Response:
    return Response(b"", status_code=200)


bare_app = Starlette(routes=[Route(PATH, bare_embeddings, methods=["POST"]), Route("/readyz", ready)])
mounted_app = Starlette(routes=[Route(MOUNTED, bare_embeddings, methods=["POST"])])


@bentoml.service(name="EchoBento", logging={"access": {"enabled": False}})
@bentoml.asgi_app(mounted_app, path="/")
class EchoBento:
    @bentoml.api(route=PATH)
    async def embeddings(self, request: EchoRequest, /) -> EchoResponse:
        count = len(inputs_of(request.input))
        return EchoResponse(
            data=[EchoEmbedding(index=i, embedding=VECTOR) for i in range(count)],
            model=request.model,
            usage=EchoUsage(prompt_tokens=count, total_tokens=count),
        )

    @bentoml.api(route=ANSWER_AS_RESPONSE)
    async def embeddings_as_response(self, request: EchoRequest, /) -> EchoResponse:
        return answer_bytes(request.model, len(inputs_of(request.input)))  # type: ignore[return-value]
