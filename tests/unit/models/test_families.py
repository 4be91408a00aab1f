"""Today's model families as plain Python, on tiny random checkpoints built as the real ones are published:
a Qwen3 embedder, causal-LM rerankers in sentence-transformers' layout and in Qwen3-Reranker's plain one, and
SPLADE. Each is compared with sentence-transformers itself (and the plain reranker with its card's formula
computed directly with transformers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from config.errors import InvalidInput, InvalidRequest, ModelLoadError
from config.settings import ModelConfig
from models.base import TokenizedText, Truncation
from models.inference.sparse_encoder import SparseTextEncoder
from models.inference.text_encoder import TextEncoder
from models.inference.text_scorer import TextScorer
from models.kinds import detect_kind
from models.postprocess import keep_largest
from models.preprocessing.text_tokenizer import TextTokenizer
from testkit.checkpoints import QWEN3_RERANKER_PREFIX, QWEN3_RERANKER_SUFFIX
from tests.references import INSTRUCTION, QUERY, TEXTS, pair_logits
from tests.tolerance import assert_close, assert_same_vectors


def _embedder(path: Path, **settings) -> tuple[TextTokenizer, TextEncoder]:
    cfg = ModelConfig(backend="torch", model_id=str(path), device="cpu", **settings)
    return TextTokenizer(path, cfg), TextEncoder(path, cfg)


def _embed(tokenizer: TextTokenizer, encoder: TextEncoder, texts: list[str], prompt: str = "") -> np.ndarray:
    length = tokenizer.prompt_length(prompt) if prompt else 0
    return encoder.forward(TokenizedText.rows("m", tokenizer.encode_texts(texts, prompt), prompt_length=length))


def test_the_families_are_detected_from_their_files(
    qwen3_embedder_path, qwen3_reranker_path, plain_qwen3_reranker_path, splade_path
):
    assert json.loads((qwen3_embedder_path / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    assert [
        detect_kind(p) for p in (qwen3_embedder_path, qwen3_reranker_path, plain_qwen3_reranker_path, splade_path)
    ] == ["embed", "rerank", "rerank", "sparse"]


@pytest.fixture(scope="module")
def qwen3(qwen3_embedder_path) -> tuple[TextTokenizer, TextEncoder]:
    return _embedder(qwen3_embedder_path)


def test_qwen3_embedder_matches_sentence_transformers(qwen3_embedder_path, qwen3):
    from sentence_transformers import SentenceTransformer

    tokenizer, encoder = qwen3
    reference = SentenceTransformer(str(qwen3_embedder_path), device="cpu", local_files_only=True)
    assert reference.tokenizer.padding_side == "left" and encoder.info.max_input_tokens == 48
    assert encoder._model[0].auto_model.config._attn_implementation == "sdpa"
    ids = tokenizer.encode_texts(TEXTS)
    assert all(row[-1] == reference.tokenizer.convert_tokens_to_ids("<|endoftext|>") for row in ids)  # EOS kept
    assert len({len(row) for row in ids}) > 10 and max(map(len, ids)) == 48  # mixed lengths, some cut
    expected = reference.encode(TEXTS, batch_size=8)
    assert_same_vectors(_embed(tokenizer, encoder, TEXTS), expected)
    one_at_a_time = np.concatenate([_embed(tokenizer, encoder, [text]) for text in TEXTS])
    assert_same_vectors(one_at_a_time, expected)
    assert_same_vectors(
        _embed(tokenizer, encoder, TEXTS, tokenizer.prompt("query")),
        reference.encode(TEXTS, prompt_name="query", batch_size=8),
    )


def test_an_instruction_is_written_with_the_models_template(qwen3_embedder_path, qwen3):
    from sentence_transformers import SentenceTransformer

    tokenizer, encoder = qwen3
    prompt = tokenizer.prompt(None, INSTRUCTION)
    assert prompt == f"Instruct: {INSTRUCTION}\nQuery:"  # the form of its `query` prompt
    reference = SentenceTransformer(str(qwen3_embedder_path), device="cpu", local_files_only=True)
    assert_same_vectors(_embed(tokenizer, encoder, TEXTS, prompt), reference.encode(TEXTS, prompt=prompt))
    with pytest.raises(InvalidRequest, match="not both"):
        tokenizer.prompt("query", INSTRUCTION)


def test_an_embedder_saved_for_chat_messages_is_refused(tmp_path, qwen3_embedder_path):
    """Saved by sentence-transformers 5 with a chat-template tokenizer, it renders texts as chat messages,
    which Embento does not: refused with the way out rather than served with other numbers."""
    folder = tmp_path / "chat"
    shutil.copytree(qwen3_embedder_path, folder)
    declared = {
        "transformer_task": "feature-extraction",
        "modality_config": {
            "text": {"method": "forward", "method_output_name": "last_hidden_state"},
            "message": {"method": "forward", "method_output_name": "last_hidden_state", "format": "flat"},
        },
    }
    (folder / "sentence_bert_config.json").write_text(json.dumps(declared))
    with pytest.raises(ModelLoadError, match="declares chat-message input"):
        TextTokenizer(folder, ModelConfig(backend="torch", model_id=str(folder)))


def test_an_instruction_is_prepended_when_the_model_has_no_template(minilm_path):
    tokenizer = TextTokenizer(minilm_path, ModelConfig(backend="torch", model_id=str(minilm_path)))
    assert tokenizer.prompt(None, "Represent this: ") == "Represent this: "
    templated = TextTokenizer(
        minilm_path,
        ModelConfig(backend="torch", model_id=str(minilm_path), instruction_template="task: {instruction} | "),
    )
    assert templated.prompt(None, "sort") == "task: sort | "


def test_bf16_on_cpu_matches_sentence_transformers_in_bf16(qwen3_embedder_path):
    import torch
    from sentence_transformers import SentenceTransformer

    tokenizer, encoder = _embedder(qwen3_embedder_path, dtype="bfloat16")
    assert encoder.info.dtype == "bfloat16"
    reference = SentenceTransformer(
        str(qwen3_embedder_path), device="cpu", local_files_only=True, model_kwargs={"dtype": torch.bfloat16}
    )
    # bf16 keeps 8 bits of mantissa; padding changes the order of its sums, so the bound is bf16's
    assert_same_vectors(
        _embed(tokenizer, encoder, TEXTS),
        reference.encode(TEXTS, batch_size=8).astype(np.float32),
        min_cosine=0.999,
        norm_rtol=1e-2,
    )


def test_include_prompt_false_leaves_each_rows_prompt_out_of_pooling(tmp_path, tiny_bert_path):
    """Rows of one batch with different prompts, each pooled without its own prompt tokens, as
    sentence-transformers pools a batch of one prompt."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    folder = tmp_path / "instructor-like"
    prompts = {"query": "represent the question for retrieval: ", "document": "represent the document: "}
    SentenceTransformer(
        modules=[Transformer(str(tiny_bert_path)), Pooling(32, "mean", include_prompt=False)],
        prompts=prompts,
        device="cpu",
    ).save_pretrained(str(folder))
    tokenizer, encoder = _embedder(folder)
    rows = []
    for name in ("query", "document"):
        prompt = tokenizer.prompt(name)
        rows += TokenizedText.rows(
            "m", tokenizer.encode_texts(TEXTS[:10], prompt), prompt_length=tokenizer.prompt_length(prompt)
        )
    reference = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    expected = np.concatenate([reference.encode(TEXTS[:10], prompt_name=name) for name in ("query", "document")])
    assert_same_vectors(encoder.forward(rows), expected)
    with_prompt = encoder.forward(TokenizedText.rows("m", [row.input_ids for row in rows]))
    assert (np.abs(with_prompt - expected).max(axis=1) > 1e-3).all(), "the prompt tokens must make a difference"


def test_normalize_false_returns_the_raw_pooled_vector(minilm_path):
    from sentence_transformers import SentenceTransformer

    tokenizer, encoder = _embedder(minilm_path)
    ids = tokenizer.encode_texts(TEXTS[:6])
    rows = TokenizedText.rows("m", ids[:3], normalize=False) + TokenizedText.rows("m", ids[3:])
    raw = SentenceTransformer(str(minilm_path), device="cpu", local_files_only=True)
    del raw[len(raw) - 1]  # its Normalize module
    outputs = encoder.forward(rows)
    assert_same_vectors(outputs[:3], raw.encode(TEXTS[:3]))
    assert np.linalg.norm(outputs[:3], axis=1).min() > 1.5  # MiniLM's pooled vectors are far from unit length
    np.testing.assert_allclose(np.linalg.norm(outputs[3:], axis=1), 1.0, rtol=1e-5)


def test_truncation_controls(minilm_path):
    tokenizer = TextTokenizer(minilm_path, ModelConfig(backend="torch", model_id=str(minilm_path)))
    long_text = " ".join(f"w{i}" for i in range(400))
    right, left = (
        tokenizer.encode_texts([long_text], truncation=Truncation(side=side))[0] for side in ("right", "left")
    )
    assert len(right) == len(left) == 256 and right[:3] != left[:3] and right[-1] == left[-1]  # both end in [SEP]
    with pytest.raises(InvalidRequest, match=r"input\[1\] is \d+ tokens; this model takes at most 256"):
        tokenizer.encode_texts(["short", long_text], truncation=Truncation(enabled=False))
    assert len(tokenizer.encode_texts(["short"], truncation=Truncation(enabled=False))[0]) == 3


@pytest.fixture(scope="module")
def qwen3_reranker(qwen3_reranker_path) -> tuple[TextTokenizer, TextScorer]:
    cfg = ModelConfig(backend="torch", model_id=str(qwen3_reranker_path), device="cpu")
    return TextTokenizer(qwen3_reranker_path, cfg, "rerank"), TextScorer(qwen3_reranker_path, cfg, "rerank")


def test_causal_cross_encoder_matches_predict(qwen3_reranker_path, qwen3_reranker):
    from sentence_transformers import CrossEncoder

    tokenizer, scorer = qwen3_reranker
    assert scorer.info.activation == "sigmoid" and scorer.info.max_input_tokens == 160
    reference = CrossEncoder(str(qwen3_reranker_path), device="cpu", local_files_only=True)
    pairs = [(QUERY, document) for document in TEXTS]
    assert max(len(ids) for ids in tokenizer.encode_pairs(QUERY, TEXTS)[0]) == 160  # long documents were cut
    logits = pair_logits(tokenizer, scorer, TEXTS)
    assert_close(logits, reference.predict(pairs, activation_fn=lambda x: x, batch_size=8))
    assert_close(1 / (1 + np.exp(-logits)), reference.predict(pairs, batch_size=8))
    assert_close(
        pair_logits(tokenizer, scorer, TEXTS, INSTRUCTION),
        reference.predict(pairs, prompt=INSTRUCTION, activation_fn=lambda x: x, batch_size=8),
    )
    assert np.ptp(logits) > 0.05, "scores of a random checkpoint should still differ by input"


def test_plain_qwen3_reranker_follows_its_card(plain_qwen3_reranker_path):
    """The card's own recipe: prefix + `<Instruct>/<Query>/<Document>` + suffix, the body cut to fit, left
    padding, P(yes) from the "yes" and "no" logits at the last position."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    limit = 160
    cfg = ModelConfig(backend="torch", model_id=str(plain_qwen3_reranker_path), max_seq_length=limit)
    tokenizer = TextTokenizer(plain_qwen3_reranker_path, cfg, "rerank")
    scorer = TextScorer(plain_qwen3_reranker_path, cfg, "rerank")
    ours = 1 / (1 + np.exp(-pair_logits(tokenizer, scorer, TEXTS, INSTRUCTION)))

    hf_tokenizer = AutoTokenizer.from_pretrained(str(plain_qwen3_reranker_path), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(plain_qwen3_reranker_path)).eval()
    prefix = hf_tokenizer.encode(QWEN3_RERANKER_PREFIX, add_special_tokens=False)
    suffix = hf_tokenizer.encode(QWEN3_RERANKER_SUFFIX, add_special_tokens=False)
    bodies = [f"<Instruct>: {INSTRUCTION}\n<Query>: {QUERY}\n<Document>: {document}" for document in TEXTS]
    encoded = hf_tokenizer(
        bodies,
        padding=False,
        truncation="longest_first",
        return_attention_mask=False,
        max_length=limit - len(prefix) - len(suffix),
    )
    batch = hf_tokenizer.pad(
        {"input_ids": [prefix + ids + suffix for ids in encoded["input_ids"]]}, padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        last = model(**batch).logits[:, -1, :]
    yes, no = hf_tokenizer.convert_tokens_to_ids("yes"), hf_tokenizer.convert_tokens_to_ids("no")
    expected = torch.nn.functional.log_softmax(last[:, [no, yes]], dim=1)[:, 1].exp().numpy()
    assert_close(ours, expected)


def test_reranker_truncation_and_instruction_errors(qwen3_reranker, tiny_reranker_path):
    tokenizer, _ = qwen3_reranker
    long_document = " ".join(TEXTS[-3:])
    with pytest.raises(InvalidInput, match=r"makes a prompt of \d+ tokens.*at most 160") as refused:
        tokenizer.encode_pairs(QUERY, ["short", long_document], truncation=Truncation(enabled=False))
    assert refused.value.index == 1  # the gateway names it by the body's field (`documents[1]`, TEI's `texts[1]`)
    with pytest.raises(InvalidRequest, match="query makes a prompt"):
        tokenizer.encode_pairs(long_document, [long_document])
    left = tokenizer.encode_pairs(QUERY, [long_document], truncation=Truncation(side="left"))[0][0]
    right = tokenizer.encode_pairs(QUERY, [long_document])[0][0]
    assert len(left) == len(right) == 160 and left[-8:] == right[-8:] and left != right  # the template's end kept
    bert = TextTokenizer(tiny_reranker_path, ModelConfig(backend="torch", model_id=str(tiny_reranker_path)), "rerank")
    with pytest.raises(InvalidRequest, match="takes no instruction"):
        bert.encode_pairs(QUERY, ["a"], instruction=INSTRUCTION)


def test_a_bare_causal_lm_needs_a_template_and_a_true_token(tmp_path, plain_qwen3_reranker_path):
    from testkit.checkpoints import QWEN3_RERANKER_CHAT_TEMPLATE

    bare = tmp_path / "bare"
    shutil.copytree(plain_qwen3_reranker_path, bare)
    (bare / "README.md").write_text("# a causal LM\n")
    assert detect_kind(bare) == "embed"
    with pytest.raises(ModelLoadError, match="set chat_template and true_token"):
        TextTokenizer(bare, ModelConfig(backend="torch", model_id=str(bare), kind="rerank"), "rerank")
    (tmp_path / "template.jinja").write_text(QWEN3_RERANKER_CHAT_TEMPLATE)
    cfg = ModelConfig(
        backend="torch",
        model_id=str(bare),
        kind="rerank",
        chat_template=str(tmp_path / "template.jinja"),
        true_token="yes",
        max_seq_length=160,
    )
    configured = pair_logits(TextTokenizer(bare, cfg, "rerank"), TextScorer(bare, cfg, "rerank"), TEXTS[:5])
    card = ModelConfig(backend="torch", model_id=str(plain_qwen3_reranker_path), max_seq_length=160)
    with_card = TextScorer(plain_qwen3_reranker_path, card, "rerank")
    ids = TextTokenizer(plain_qwen3_reranker_path, card, "rerank").encode_pairs(QUERY, TEXTS[:5])[0]
    yes_minus_no = with_card.forward(TokenizedText.rows("m", ids))[:, 0]
    no_logit = yes_minus_no - configured  # true_token alone scores with the "yes" logit, not its odds over "no"
    assert np.ptp(no_logit) > 0 and not np.allclose(configured, yes_minus_no)
    with pytest.raises(ModelLoadError, match="true_token 'oui'"):
        TextScorer(bare, cfg.model_copy(update={"true_token": "oui"}), "rerank")


@pytest.fixture(scope="module")
def splade(splade_path) -> tuple[TextTokenizer, SparseTextEncoder]:
    cfg = ModelConfig(backend="torch", model_id=str(splade_path), device="cpu")
    return TextTokenizer(splade_path, cfg), SparseTextEncoder(splade_path, cfg)


def test_splade_matches_sparse_encoder(splade_path, splade):
    from sentence_transformers import SparseEncoder

    tokenizer, encoder = splade
    assert encoder.info.kind == "sparse" and encoder.info.dimension == 30522
    outputs = encoder.forward(TokenizedText.rows("m", tokenizer.encode_texts(TEXTS)))
    reference = SparseEncoder(str(splade_path), device="cpu", local_files_only=True)
    for k in (None, 5):
        expected = reference.encode(TEXTS, max_active_dims=k, batch_size=8).to_dense().numpy()
        for text, output, dense in zip(TEXTS, outputs, expected):
            entries = keep_largest(output, k)
            active = np.flatnonzero(dense)
            assert entries[0].astype(int).tolist() == active.tolist(), text
            assert_close(entries[1], dense[active])
    assert 5 < np.median([output.shape[1] for output in outputs]) < 1000  # sparse, as a trained SPLADE is


def test_a_bare_masked_lm_is_sparse_only_when_configured(tmp_path, minilm_path):
    """`*ForMaskedLM` alone is also what plain BERT checkpoints are: `kind: sparse` serves one as
    sentence-transformers does, with SPLADE max pooling."""
    import torch
    from sentence_transformers import SparseEncoder
    from transformers import BertForMaskedLM

    from models.kinds import model_kind
    from testkit.checkpoints import copy_bert_tokenizer, tiny_bert_config

    torch.manual_seed(24)
    BertForMaskedLM(tiny_bert_config(num_hidden_layers=1)).save_pretrained(tmp_path)
    copy_bert_tokenizer(minilm_path, tmp_path)
    assert detect_kind(tmp_path) == "embed"
    cfg = ModelConfig(backend="torch", model_id=str(tmp_path), kind="sparse", max_seq_length=64)
    assert model_kind(cfg) == "sparse"
    outputs = SparseTextEncoder(tmp_path, cfg).forward(
        TokenizedText.rows("m", TextTokenizer(tmp_path, cfg).encode_texts(TEXTS[:8]))
    )
    reference = SparseEncoder(str(tmp_path), device="cpu", local_files_only=True)
    reference.max_seq_length = 64
    for output, dense in zip(outputs, reference.encode(TEXTS[:8]).to_dense().numpy()):
        assert output[0].astype(int).tolist() == np.flatnonzero(dense).tolist()
        assert_close(output[1], dense[np.flatnonzero(dense)])
