"""The reference vectors of a task adapter: the base with that adapter merged into its weights by peft
(`merge_and_unload`, what Jina publishes as its per-task repositories), run by sentence-transformers.

sentence-transformers' own `load_adapter` goes through transformers' peft integration, which in transformers
5.25 asks for peft >= 0.22 (0.21.2 is installed): it is not the reference here."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np


@cache
def _merged(folder: Path, task: str | None) -> Any:  # SentenceTransformer
    from peft import PeftModel
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    if task is not None:
        adapted = PeftModel.from_pretrained(model[0].auto_model, str(folder / "adapters" / task))
        model[0].auto_model = adapted.merge_and_unload()
    return model


def adapter_vectors(folder: Path, task: str | None, texts: list[str], prompt: str = "") -> np.ndarray:
    """`texts` under `prompt`, through the base with `task`'s adapter merged (None: the base alone)."""
    return _merged(folder, task).encode(texts, prompt=prompt)
