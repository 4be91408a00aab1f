"""POST /rerank, the one path two client families share: infinity's body (`documents`) and TEI's (`texts`).

Here, and only here, sit the body that takes both families' fields, the one rule that tells them apart (used by
the route below and, through `gateway.http.errors.TEI_BODIES`, by `ErrorBodies` for the errors the framework raises
before the route runs), and the hand-over to the family's adapter with that family's fields alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, Field, StrictBool, StrictStr
from starlette.responses import JSONResponse

from gateway.validation.bodies import check_rerank_fields
from gateway.wire import infinity, tei
from gateway.wire.common import Document, RerankRequest

if TYPE_CHECKING:
    from gateway.engine import Engine

M = TypeVar("M", bound=BaseModel)


class RerankBody(RerankRequest):
    """POST /rerank: infinity's body (`documents`) or TEI's (`texts`, `return_text`), told apart by the body."""

    # Optional here, where RerankRequest requires it: TEI's body has `texts` instead. A RerankBody is never used
    # as a RerankRequest: `family_body` validates the chosen family's own body out of it.
    documents: list[Document] | None = None  # type: ignore[assignment]
    texts: list[StrictStr] | None = Field(None, description="TEI's documents; the answer is then TEI's.")
    return_text: StrictBool = Field(False, description="TEI's: each result carries its text.")


def is_tei_rerank(body: Mapping[str, Any]) -> bool:
    """Whether a /rerank body is TEI's (`texts`, not infinity's `documents`): it is then answered, errors too, in
    TEI's shapes. The one test, for the route and for errors the framework raises before it (`gateway.http.errors`)."""
    return body.get("texts") is not None and body.get("documents") is None


async def rerank(engine: Engine, body: RerankBody) -> infinity.InfinityRerankResponse | JSONResponse:
    """TEI's adapter answers a TEI body, infinity's every other; neither texts nor documents, or both, is a 400."""
    if is_tei_rerank(vars(body)):
        return await tei.rerank(engine, family_body(tei.TeiRerankRequest, body))
    check_rerank_fields(vars(body))
    return await infinity.rerank(engine, family_body(RerankRequest, body))


def family_body(model: type[M], body: RerankBody) -> M:
    """The fields one family's body declares, out of the shared body; the others are left behind."""
    return model.model_validate({name: getattr(body, name) for name in model.model_fields})
