"""The gateway-side preparation of each served model's inputs, chosen by its kind (`KindSpec.preprocessor`): a
tokenizer for text models, the checkpoint's processor for multimodal ones. Loaded at the gateway's start."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from config.settings import EmbentoConfig, ModelConfig
from gateway.validation.models import text_model
from models.base import Kind, ModelInfo, Preprocessor
from models.kinds import preprocessor_class
from models.preprocessing.media_processor import MediaProcessor
from models.preprocessing.text_tokenizer import TextTokenizer
from models.preprocessing.vl_processor import VisionLanguageProcessor
from models.resolve import resolve_model

# The load-failure policy (`runners.loading.load_models`): each model loaded, and why the others failed.
LoadAll = Callable[[list[ModelConfig], Callable[[ModelConfig], object], bool], tuple[dict, dict[str, str]]]


@dataclass
class Preprocessors:
    """Each served model's input preparation (`KindSpec.preprocessor`), by served name."""

    by_model: dict[str, Preprocessor] = field(default_factory=dict)

    def of(self, info: ModelInfo) -> Preprocessor:
        return self.by_model[info.served_model_name]

    def tokenizer(self, info: ModelInfo) -> TextTokenizer:
        """The model's tokenizer: for the routes and rows that take text only (tokenize, token ids, pairs)."""
        return text_model(info, self.by_model.get(info.served_model_name))

    def processor(self, info: ModelInfo) -> MediaProcessor | VisionLanguageProcessor:
        """The model's media processor: for a model whose kind `takes_media`."""
        preparation = self.of(info)
        assert isinstance(preparation, MediaProcessor | VisionLanguageProcessor), "only for kinds that take media"
        return preparation


def load_preprocessors(
    config: EmbentoConfig, kinds: Mapping[str, Kind], load_all: LoadAll
) -> tuple[Preprocessors, dict[str, str]]:
    """Every configured model's preprocessor, and why those that failed to load did (under `load_all`'s
    policy: stop the server, or with `allow_partial` serve the others)."""
    loaded = Preprocessors()

    def load(cfg: ModelConfig) -> None:
        name, folder = cfg.served_model_name, resolve_model(cfg.model_id, cfg.revision)
        loaded.by_model[name] = preprocessor_class(kinds[name])(folder, cfg, kinds[name])

    _, failed = load_all(config.models, load, config.allow_partial)
    return loaded, failed
