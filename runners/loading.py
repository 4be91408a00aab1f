"""The load-failure policy of a model service: stop the server, or with `allow_partial` serve the rest."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TypeVar

from bento.serving.lifecycle import stop_server
from config.errors import EmbentoError
from config.settings import ModelConfig

logger = logging.getLogger(__name__)
T = TypeVar("T")


def load_models(
    configs: list[ModelConfig], load: Callable[[ModelConfig], T], allow_partial: bool
) -> tuple[dict[str, T], dict[str, str]]:
    """Each model loaded, by served name, and why the others failed. A failure stops the server, or with
    `allow_partial` is logged and recorded while the other models load and serve."""
    _quiet_progress_bars()
    loaded: dict[str, T] = {}
    failed: dict[str, str] = {}
    for cfg in configs:
        try:
            loaded[cfg.served_model_name] = load(cfg)
        except Exception as exc:  # any cause: loading again would meet it again
            reason = exc.message if isinstance(exc, EmbentoError) else f"a model failed to load: {exc!r}"
            if not allow_partial:
                stop_server(reason)
                raise
            logger.error("%s; serving the other models (allow_partial)", reason)
            failed[cfg.served_model_name] = reason
    return loaded, failed


def _quiet_progress_bars() -> None:
    """transformers 5 draws a progress bar for each checkpoint it loads: a server's log keeps one line per event.
    transformers takes huggingface_hub's setting when it is first imported, so a process whose models need no
    transformers (ONNX Runtime without torch) does not import it only to silence it: 2.5 s of a start on a
    2-core Intel Xeon."""
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    if (transformers_logging := sys.modules.get("transformers.utils.logging")) is not None:
        transformers_logging.disable_progress_bar()  # imported already: its own switch, read at each bar
