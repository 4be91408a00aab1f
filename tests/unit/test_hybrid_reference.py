"""Issue 35's reference fixtures hold what they claim: PyLate's checkpoint layout and answers for the tiny ColBERT,
FlagEmbedding's for the tiny BGE-M3, in the shapes the server's tests compare with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.hybrid_reference import (
    COLBERT_DOCUMENT_LENGTH,
    COLBERT_EMBEDDING_SIZE,
    COLBERT_QUERY_LENGTH,
    DOCUMENTS,
    M3_WEIGHTS,
    QUERIES,
    ColbertReference,
    M3Reference,
    ReferenceFailed,
    run_reference,
)

M3_HIDDEN = 32


def unit_rows(vectors: np.ndarray) -> bool:
    return bool(np.allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5))


def test_colbert_checkpoint_is_pylates_layout(colbert_path: Path) -> None:
    config = json.loads((colbert_path / "config_sentence_transformers.json").read_text())
    assert config["model_type"] == "ColBERT"
    assert (config["query_prefix"], config["document_prefix"]) == ("[Q] ", "[D] ")
    assert (config["query_length"], config["document_length"]) == (COLBERT_QUERY_LENGTH, COLBERT_DOCUMENT_LENGTH)
    assert config["do_query_expansion"] is True and config["attend_to_expansion_tokens"] is False
    assert {",", ".", "!", ";", ":"} <= set(config["skiplist_words"])
    modules = json.loads((colbert_path / "modules.json").read_text())
    dense = next(module for module in modules if module["type"] == "pylate.models.Dense.Dense")
    dense_config = json.loads((colbert_path / dense["path"] / "config.json").read_text())
    assert (dense_config["in_features"], dense_config["out_features"]) == (32, COLBERT_EMBEDDING_SIZE)
    assert dense_config["bias"] is False
    assert (colbert_path / dense["path"] / "model.safetensors").is_file()


def test_colbert_reference_shapes(colbert_reference: ColbertReference) -> None:
    assert len(colbert_reference.queries) == len(QUERIES)
    assert len(colbert_reference.documents) == len(DOCUMENTS)
    # every query has query_length vectors, the expansion ([MASK]) positions included; the long one is truncated
    assert {q.shape for q in colbert_reference.queries} == {(COLBERT_QUERY_LENGTH, COLBERT_EMBEDDING_SIZE)}
    counts = [d.shape[0] for d in colbert_reference.documents]
    assert len(set(counts)) > 2 and max(counts) <= COLBERT_DOCUMENT_LENGTH
    assert all(d.shape[1] == COLBERT_EMBEDDING_SIZE and d.dtype == np.float32 for d in colbert_reference.documents)
    assert all(unit_rows(v) for v in colbert_reference.queries + colbert_reference.documents)
    # the long document reaches the limit less the punctuation the skiplist drops: it was truncated
    assert counts[4] >= COLBERT_DOCUMENT_LENGTH - 4


def test_colbert_scores_are_maxsim_sums(colbert_reference: ColbertReference) -> None:
    scores = colbert_reference.scores
    assert scores.shape == (len(QUERIES), len(DOCUMENTS))
    expected = np.array(
        [[(q @ d.T).max(axis=1).sum() for d in colbert_reference.documents] for q in colbert_reference.queries]
    )
    np.testing.assert_allclose(scores, expected, rtol=1e-5)
    assert len(np.unique(np.round(scores, 3))) == scores.size  # scores tell the documents apart


def test_bge_m3_checkpoint_layout(bge_m3_path: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(bge_m3_path)
    assert config.model_type == "xlm-roberta" and config.hidden_size == M3_HIDDEN
    tokenizer = AutoTokenizer.from_pretrained(bge_m3_path)
    # BAAI's tokenizer_config.json names XLMRobertaTokenizer: transformers 5's one class of that name is Rust-backed
    # (its "Fast" name an alias), transformers 4 loads its XLMRobertaTokenizerFast for it
    assert json.loads((bge_m3_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "XLMRobertaTokenizer"
    assert type(tokenizer).__name__ == "XLMRobertaTokenizer" and tokenizer.is_fast
    assert len(tokenizer) == config.vocab_size
    specials = [tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id]
    assert specials == [0, 1, 2, 3]
    assert tokenizer.mask_token_id == len(tokenizer) - 1
    assert tokenizer.added_tokens_decoder[tokenizer.mask_token_id].lstrip  # XLM-R's `<mask>` takes the space before it
    ids = tokenizer("quick brown fox").input_ids
    assert ids[0] == 0 and ids[-1] == 2
    assert tokenizer.model_max_length == config.max_position_embeddings - 2
    colbert = torch.load(bge_m3_path / "colbert_linear.pt", weights_only=True)
    sparse = torch.load(bge_m3_path / "sparse_linear.pt", weights_only=True)
    assert {name: tuple(t.shape) for name, t in colbert.items()} == {"weight": (32, 32), "bias": (32,)}
    assert {name: tuple(t.shape) for name, t in sparse.items()} == {"weight": (1, 32), "bias": (1,)}


def test_bge_m3_tokenizer_file_is_what_transformers_5_runs(bge_m3_path: Path) -> None:
    """The reference venv's transformers 4 runs tokenizer.json as it is; transformers 5's XLMRobertaTokenizer rebuilds
    its own pipeline around the file's vocabulary. Both must be one tokenizer, or the two sides encode other ids."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(bge_m3_path)
    as_saved = Tokenizer.from_file(str(bge_m3_path / "tokenizer.json"))
    for text in QUERIES + DOCUMENTS:
        assert as_saved.encode(text).ids == tokenizer(text).input_ids, text


def test_m3_reference_shapes(m3_reference: M3Reference, bge_m3_path: Path) -> None:
    from transformers import AutoTokenizer

    texts = QUERIES + DOCUMENTS
    tokenizer = AutoTokenizer.from_pretrained(bge_m3_path)
    assert m3_reference.dense.shape == (len(texts), M3_HIDDEN) and unit_rows(m3_reference.dense)
    assert len(m3_reference.colbert) == len(m3_reference.sparse) == len(texts)
    dropped = {tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}
    for text, vectors, weights in zip(texts, m3_reference.colbert, m3_reference.sparse):
        ids = tokenizer(text).input_ids
        assert vectors.shape == (len(ids) - 1, M3_HIDDEN) and unit_rows(vectors)  # every token but the first
        assert weights and all(w > 0 for w in weights.values())
        assert set(weights) <= set(ids) - dropped
    # `<unk>` is in the texts (and dropped from their sparse output): the drop is exercised
    assert any(tokenizer.unk_token_id in tokenizer(text).input_ids for text in texts)
    # ids decided by the relu are compared exactly: no raw weight may sit near its zero
    assert m3_reference.sparse_margin > 1e-3


@pytest.mark.parametrize("mode", ["dense", "sparse", "colbert", "hybrid"])
def test_m3_scores(m3_reference: M3Reference, mode: str) -> None:
    scores = m3_reference.scores[mode]
    assert scores.shape == (len(QUERIES), len(DOCUMENTS)) and np.all(np.isfinite(scores))
    assert len(np.unique(np.round(scores, 4))) > scores.size // 2  # not one value everywhere


def test_m3_scores_follow_the_outputs(m3_reference: M3Reference) -> None:
    """compute_score's pairs agree with encode's outputs (dense dot, sparse overlap, ColBERT mean MaxSim), and the
    hybrid is their weighted mean: the reference is one model, read two ways."""
    n = len(QUERIES)
    for i in range(n):
        for j in range(len(DOCUMENTS)):
            q_sparse, d_sparse = m3_reference.sparse[i], m3_reference.sparse[n + j]
            dense = float(m3_reference.dense[i] @ m3_reference.dense[n + j])
            sparse = sum(w * d_sparse[t] for t, w in q_sparse.items() if t in d_sparse)
            colbert = float((m3_reference.colbert[i] @ m3_reference.colbert[n + j].T).max(axis=1).mean())
            got = {mode: m3_reference.scores[mode][i, j] for mode in ("dense", "sparse", "colbert", "hybrid")}
            assert got["dense"] == pytest.approx(dense, abs=1e-5)
            assert got["sparse"] == pytest.approx(sparse, abs=1e-5)
            assert got["colbert"] == pytest.approx(colbert, abs=1e-5)
            hybrid = np.dot(M3_WEIGHTS, [dense, sparse, colbert]) / sum(M3_WEIGHTS)
            assert got["hybrid"] == pytest.approx(hybrid, abs=1e-5)


def test_a_failing_reference_script_says_why() -> None:
    """A reference that cannot be computed fails loudly, with the script's own output, never a silent skip."""
    with pytest.raises(ReferenceFailed, match="no-such-script.py"):
        run_reference("no-such-script.py")
