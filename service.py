"""Embento's gateway: the HTTP service that composes the model services (docs/architecture.md).

Each route is one line onto its client family's adapter (`gateway/wire/`), which turns the body into a query
for the engine (`gateway.engine`) and its result into the family's answer; rows go to the model service of
the model's kind (`KindSpec.model_service`).
"""

from __future__ import annotations

import os

os.environ.setdefault("BENTOML_DO_NOT_TRACK", "True")  # no usage tracking unless a user opts in

from bento.serving.start_failures import report_start_failures  # noqa: E402

report_start_failures()  # first: the configuration is read while the imports below run, and may fail there

from typing import Any, cast

import bentoml
from starlette.applications import Starlette

from bento.packaging.container_image import ARGS, IMAGE, bento_envs, image_labels
from bento.packaging.store import bento_config_env, check_served_bento, pin_store_models
from bento.serving.lifecycle import exit_nonzero_after_failed_start, stop_server
from bento.serving.patches import fix_media_types, patch_serving
from bento.serving.placement import gateway_workers, served_workers
from bento.serving.process_memory import report_process_memory
from bento.serving.server_logging import configure_server_logging
from config.served import served_config
from gateway.answering import answered
from gateway.http import assembly
from gateway.wire import cohere, infinity, openai, shared_rerank, tei, voyage
from gateway.wire.common import RerankRequest
from runners import MODEL_SERVICES
from runners.loading import load_models
from runners.service_config import dispatch_max_rows
from server_state.server_files import remove_server_files

GATEWAY_NAME = "Embento"  # the BentoML service name of the gateway
CONFIG = served_config()  # store models (`bentoml://…`) resolved to their folders
patch_serving(CONFIG.tracing)
configure_server_logging(CONFIG.log.request_content)  # never a request's content in a log line
PROCESS = assembly.gateway_process(CONFIG, lambda: served_workers(GATEWAY_NAME))  # what the routes run on


def depend_on_model_services(cls: type) -> type:
    """Only the model services this configuration needs are started, and built into a Bento: each an
    attribute named as its service."""
    for name in PROCESS.model_services:
        setattr(cls, name, bentoml.depends(MODEL_SERVICES[name]))
    return cls


routes = Starlette()  # GET routes; BentoML's own API routes are POST-only


@bentoml.service(
    name=GATEWAY_NAME,
    workers=gateway_workers(CONFIG),
    image=IMAGE,
    envs=[*bento_envs(ARGS), bento_config_env()],  # the configuration travels in bento.yaml
    labels={**image_labels(ARGS), "models": ",".join(PROCESS.kinds)},
    traffic={"timeout": CONFIG.request_timeout_s + 30},
    logging={"access": {"enabled": False}},
    http=assembly.http_settings(CONFIG),
)
@bentoml.asgi_app(routes, path="/")
@pin_store_models(CONFIG.models)  # the gateway reads their tokenizers and processors
@depend_on_model_services
class Gateway:
    """The HTTP routes: each a line onto its client family's adapter."""

    def __init__(self) -> None:
        report_process_memory(GATEWAY_NAME)
        clients = {name: getattr(self, name) for name in PROCESS.model_services}
        self.worker = assembly.gateway_worker(PROCESS, clients, load_models, dispatch_max_rows())
        self.engine = self.worker.engine

    @bentoml.on_startup
    async def _start(self) -> None:
        assembly.start_worker(PROCESS, self.worker, stop_server)

    async def __is_ready__(self) -> bool:
        return await PROCESS.lifecycle.is_ready()

    # OpenAI and infinity
    @bentoml.api(route="/v1/embeddings")
    async def embeddings(self, request: openai.EmbeddingRequest, /) -> openai.EmbeddingResponse:
        """OpenAI-compatible embeddings."""
        return await answered(openai.embed, self.engine, request)

    @bentoml.api(route="/embeddings")
    async def embeddings_unversioned(self, request: openai.EmbeddingRequest, /) -> openai.EmbeddingResponse:
        """The same, at infinity's path."""
        return await answered(openai.embed, self.engine, request)

    @bentoml.api(route="/embeddings_image")
    async def embeddings_image(self, request: infinity.LegacyMediaRequest, /) -> openai.EmbeddingResponse:
        """infinity's legacy image route: `input` is data URIs or URLs."""
        return await answered(infinity.embed_images, self.engine, request)

    @bentoml.api(route="/embeddings_audio")
    async def embeddings_audio(self, request: infinity.LegacyMediaRequest, /) -> openai.EmbeddingResponse:
        """infinity's legacy audio route: `input` is data URIs or URLs."""
        return await answered(infinity.embed_audio, self.engine, request)

    @bentoml.api(route="/v1/rerank")
    async def rerank_v1(self, request: RerankRequest, /) -> cohere.RerankResponse:
        """Cohere v1 and Jina rerank: documents come back as `{"text": ...}`."""
        return await answered(cohere.rerank_v1, self.engine, request)

    @bentoml.api(route="/v2/rerank")
    async def rerank_v2(self, request: cohere.CohereV2RerankRequest, /) -> cohere.CohereV2RerankResponse:
        """Cohere v2 rerank: indices and scores only."""
        return await answered(cohere.rerank_v2, self.engine, request)

    @bentoml.api(route="/rerank")
    async def rerank(self, request: shared_rerank.RerankBody, /) -> infinity.InfinityRerankResponse:
        """infinity's rerank (`documents`: documents come back as plain strings), or TEI's (`texts`: TEI's bare
        list, and TEI's error shape)."""
        return await answered(shared_rerank.rerank, self.engine, request)

    @bentoml.api(route="/v1/classify")
    async def classify(self, request: infinity.ClassifyRequest, /) -> infinity.ClassifyResponse:
        """infinity's classify: every label's score per input."""
        return await answered(infinity.classify, self.engine, request)

    @bentoml.api(route="/classify")
    async def classify_unversioned(self, request: infinity.ClassifyRequest, /) -> infinity.ClassifyResponse:
        """The same, at infinity's path."""
        return await answered(infinity.classify, self.engine, request)

    # Voyage
    @bentoml.api(route=voyage.VOYAGE_PATH)
    async def contextualized_embeddings(
        self, request: voyage.ContextualizedRequest, /
    ) -> voyage.ContextualizedResponse:
        """Voyage's contextualized embeddings: each document's chunks embedded in the context of the whole."""
        return await answered(voyage.contextualized, self.engine, request)

    @bentoml.api(route=voyage.MULTIMODAL_PATH)
    async def multimodal_embeddings(self, request: voyage.MultimodalRequest, /) -> voyage.MultimodalResponse:
        """Voyage's multimodal embeddings: each input's texts and images, in order, one vector."""
        return await answered(voyage.multimodal, self.engine, request)

    # Cohere
    @bentoml.api(route="/v1/embed")
    async def cohere_embed_v1(self, request: cohere.CohereEmbedRequest, /) -> dict:
        """Cohere v1 embed: float vectors, or by type (int8, uint8, binary, ubinary, base64)."""
        return await answered(cohere.embed_v1, self.engine, request)

    @bentoml.api(route="/v2/embed")
    async def cohere_embed_v2(self, request: cohere.CohereV2EmbedRequest, /) -> dict:
        """Cohere v2 embed: texts, images or content inputs, by type."""
        return await answered(cohere.embed_v2, self.engine, request)

    # TEI
    @bentoml.api(route="/embed")
    async def tei_embed(self, request: tei.TeiEmbedRequest, /) -> list:
        """TEI's embed: a bare list of vectors."""
        return await answered(tei.embed, self.engine, request)

    @bentoml.api(route="/embed_sparse")
    async def embed_sparse(self, request: tei.SparseEmbeddingRequest, /) -> list[list[tei.SparseValue]]:
        """TEI's sparse route: per input, its active vocabulary entries as `{"index", "value"}`."""
        return await answered(tei.embed_sparse, self.engine, request)

    @bentoml.api(route="/predict")
    async def tei_predict(self, request: tei.TeiPredictRequest, /) -> list:
        """TEI's predict: every label's score for a text or a pair, or for each in a batch."""
        return await answered(tei.predict, self.engine, request)

    @bentoml.api(route="/similarity")
    async def tei_similarity(self, request: tei.TeiSimilarityRequest, /) -> list[float]:
        """TEI's (and the sentence-similarity task's) cosine of a sentence with each of the others."""
        return await answered(tei.similarity, self.engine, request)

    @bentoml.api(route="/tokenize")
    async def tei_tokenize(self, request: tei.TeiTokenizeRequest, /) -> list[list[dict]]:
        """TEI's tokenize: per input, each token's id, text, whether it is special and its character offsets."""
        return await answered(tei.tokenize, self.engine, request)

    @bentoml.api(route="/decode")
    async def tei_decode(self, request: tei.TeiDecodeRequest, /) -> list[str]:
        """TEI's decode: token ids back to text."""
        return await answered(tei.decode, self.engine, request)

    @bentoml.api(route="/")
    async def tei_root(self, request: tei.TeiRootRequest, /) -> Any:
        """TEI's root, as `huggingface_hub.InferenceClient(base_url)` calls it: the task is told by the body,
        else by the kind of the model asked for (or the first served)."""
        return await answered(tei.root, self.engine, request)


exit_nonzero_after_failed_start()
remove_server_files()
# mypy keeps a class's own type under a class decorator: bentoml.service made Gateway a Service.
SERVICES = [Gateway, *(dependency.on for dependency in cast("bentoml.Service[Any]", Gateway).dependencies.values())]
check_served_bento({service.name for service in SERVICES})
for service in SERVICES:
    fix_media_types(service)
assembly.install(Gateway, routes, PROCESS)
