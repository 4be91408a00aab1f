"""The model services, one per modality, each with adaptive batching; service.py composes them.

The design card calls them runners: they are BentoML 1.4 services (`@bentoml.service`, batchable APIs), not the
deprecated `bentoml.Runner`.

`MODEL_SERVICES` maps each BentoML service name (`KindSpec.model_service`) to its class. It is built on first
use: defining a service reads the configuration, and `runners.pool` or `runners.service_config` alone must
not need that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import bentoml

    MODEL_SERVICES: dict[str, bentoml.Service]  # made by __getattr__ on first use


def __getattr__(name: str) -> object:
    if name != "MODEL_SERVICES":
        raise AttributeError(f"module 'runners' has no attribute {name!r}")
    from runners.model_services import ClapEmbedder, ClipEmbedder, ColPaliEmbedder, Reranker, TextEmbedder

    services: dict[str, bentoml.Service] = {
        cls.name: cls for cls in (TextEmbedder, Reranker, ClipEmbedder, ClapEmbedder, ColPaliEmbedder)
    }
    globals()["MODEL_SERVICES"] = services
    return services
