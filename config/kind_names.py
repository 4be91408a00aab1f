"""The kind names: the keys of the kind registry (`models/kinds.py`, which says what each means). They live here, at
the bottom of the layers, because the configuration's `kind` takes them; no other module spells them out
(tests/architecture/test_kind_names.py)."""

from __future__ import annotations

from typing import Literal

Kind = Literal[
    "embed", "sparse", "rerank", "classify", "clip", "clap", "colpali", "colbert", "hybrid", "vl-embed", "vl-rerank"
]
