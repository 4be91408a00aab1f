"""`models/` as plain Python: no BentoML, compared with sentence-transformers directly."""

from __future__ import annotations

import base64
import random
import re
from importlib.metadata import distribution

import numpy as np
import pytest

from config.errors import ConfigError, InvalidRequest, ModelLoadError
from config.settings import ModelConfig
from models.base import TokenizedText
from models.batching import plan_batches, run_isolated
from models.inference.text_encoder import TextEncoder
from models.postprocess import to_base64, truncate_dimensions
from models.preprocessing.text_tokenizer import TextTokenizer
from models.resolve import resolve_model
from testkit.checkpoints import WORDS
from testkit.sentences import make_sentences
from tests.conftest import MINILM
from tests.tolerance import assert_same_vectors


@pytest.fixture(scope="module")
def st_model(minilm_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu")


@pytest.fixture(scope="module")
def minilm(minilm_path) -> tuple[TextTokenizer, TextEncoder]:
    cfg = ModelConfig(backend="torch", model_id=MINILM, device="cpu")
    return TextTokenizer(minilm_path, cfg), TextEncoder(minilm_path, cfg)


def test_packaged_default_resolves_offline(minilm_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model(MINILM) == minilm_path
    assert (minilm_path / "modules.json").is_file()


def test_unavailable_hub_model_names_the_model_and_the_way_out(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelLoadError) as caught:
        resolve_model("some-org/not-cached-model")
    assert "some-org/not-cached-model" in caught.value.message
    assert "HF_HUB_OFFLINE" in caught.value.message and "local folder" in caught.value.message


@pytest.mark.parametrize(("revision", "command"), [(None, "download org/m"), ("v2", "download org/m --revision v2")])
def test_the_download_advice_is_a_command_the_installed_hub_client_has(monkeypatch, tmp_path, revision, command):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelLoadError) as caught:
        resolve_model("org/m", revision)
    advised = re.search(r"`([^`]+)`", caught.value.message)
    assert advised is not None, caught.value.message
    program, _, arguments = advised.group(1).partition(" ")
    shipped = {
        script.name for script in distribution("huggingface_hub").entry_points if script.group == "console_scripts"
    }
    assert program in shipped and arguments == command, (advised.group(1), shipped)


def test_missing_local_folder():
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model("./no/such/folder")


def test_tokenizer_and_encoder_match_sentence_transformers(minilm, st_model):
    tokenizer, encoder = minilm
    sentences = make_sentences()
    ids = tokenizer.encode_texts(sentences)
    assert max(len(i) for i in ids) == 256 == encoder.info.max_input_tokens
    expected_ids = st_model.tokenize(sentences)["input_ids"]
    for row, got in zip(expected_ids, ids):
        assert row[row != 0].tolist() == got
    assert_same_vectors(encoder.forward(TokenizedText.rows("test", ids)), st_model.encode(sentences))
    assert encoder.info.dimension == 384 and encoder.info.normalized


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("checkpoint", ["minilm_path", "tiny_clap_path", "tiny_colqwen2_path"])
def test_text_is_tokenized_as_transformers_tokenizes_it(checkpoint, side, request, tmp_path):
    """`encode_texts` calls the Rust tokenizer directly; it must give what the transformers call gives, for
    WordPiece, byte-level BPE and word-level vocabularies, truncating on the tokenizer's side."""
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(str(request.getfixturevalue(checkpoint)), truncation_side=side).save_pretrained(
        tmp_path
    )
    reference = AutoTokenizer.from_pretrained(str(tmp_path))
    tokenizer = TextTokenizer(tmp_path, ModelConfig(backend="torch", model_id=str(tmp_path), max_seq_length=12))
    texts = ["hello", "Hello World, again!", " leading space", " ".join(WORDS), "<unk> stays text", "é ü 漢字"]
    expected = reference(texts, truncation=True, max_length=12)["input_ids"]
    assert tokenizer.encode_texts(texts) == expected
    assert len(expected[3]) == 12 < len(reference(texts[3])["input_ids"])  # the long text really is cut
    assert (
        tokenizer.encode_texts(texts, "query: ")
        == reference(["query: " + text for text in texts], truncation=True, max_length=12)["input_ids"]
    )


def test_token_ids_are_framed_and_checked(minilm):
    tokenizer, _ = minilm
    assert tokenizer.encode_ids([[7592, 2088]]) == [[101, 7592, 2088, 102]]
    assert tokenizer.encode_ids([[101, 7592, 2088, 102]]) == [[101, 7592, 2088, 102]]
    long = tokenizer.encode_ids([[7592] * 1000])[0]
    assert len(long) == 256 and long[0] == 101 and long[-1] == 102
    with pytest.raises(InvalidRequest, match="outside this model's vocabulary"):
        tokenizer.encode_ids([[5], [30522]])


def test_prompts_are_prefixed(minilm_path, st_model):
    cfg = ModelConfig(backend="torch", model_id=MINILM, prompts={"query": "query: "}, default_prompt_name="query")
    tokenizer = TextTokenizer(minilm_path, cfg)
    assert tokenizer.prompt(None) == "query: "
    expected = st_model.tokenize(["query: hello"])["input_ids"][0].tolist()
    assert tokenizer.encode_texts(["hello"], tokenizer.prompt(None)) == [expected]
    with pytest.raises(InvalidRequest, match="unknown prompt_name"):
        tokenizer.prompt("passage")
    with pytest.raises(ConfigError, match="default_prompt_name"):
        TextTokenizer(minilm_path, ModelConfig(backend="torch", model_id=MINILM, default_prompt_name="missing"))


def test_pooling_and_normalize_overrides(minilm_path, minilm, st_model):
    tokenizer, _ = minilm
    ids = tokenizer.encode_texts(["one sentence", "and another, rather longer sentence"])
    cls_raw = TextEncoder(minilm_path, ModelConfig(backend="torch", model_id=MINILM, pooling="cls", normalize=False))
    assert not cls_raw.info.normalized
    token_states = st_model.encode(
        ["one sentence", "and another, rather longer sentence"], output_value="token_embeddings"
    )
    assert_same_vectors(
        cls_raw.forward(TokenizedText.rows("test", ids)), np.stack([t[0].numpy() for t in token_states])
    )


def test_plan_batches_respects_count_and_token_budget():
    lengths = [5, 100, 3, 50, 7, 100, 2]
    passes = plan_batches(lengths, batch_size=3, max_batch_tokens=200)
    assert sorted(i for p in passes for i in p) == list(range(len(lengths)))
    for chunk in passes:
        assert len(chunk) <= 3
        assert max(lengths[i] for i in chunk) * len(chunk) <= 200
    assert [lengths[i] for p in passes for i in p] == sorted(lengths)  # passes of similar lengths
    assert plan_batches([1000], batch_size=4, max_batch_tokens=10) == [[0]]  # too long for the budget: alone


def plan_cost(lengths: list[int], passes: list[list[int]], overhead: int) -> int:
    return sum(overhead + len(p) * max(lengths[i] for i in p) for p in passes)


def test_plan_batches_finds_the_cheapest_cuts():
    """Against every way of cutting the sorted lengths into passes (2^(n-1) of them)."""
    rng = random.Random(3)
    for _ in range(200):
        lengths = [rng.randint(1, 120) for _ in range(rng.randint(1, 9))]
        batch_size, budget, overhead = rng.randint(1, 5), rng.randint(50, 400), rng.choice([0, 8, 32, 500])
        ordered = sorted(range(len(lengths)), key=lengths.__getitem__)
        best = float("inf")
        for mask in range(2 ** (len(lengths) - 1)):
            cuts = [0] + [i + 1 for i in range(len(lengths) - 1) if mask >> i & 1] + [len(lengths)]
            passes = [ordered[a:b] for a, b in zip(cuts, cuts[1:])]
            if all(len(p) <= batch_size and (len(p) == 1 or len(p) * lengths[p[-1]] <= budget) for p in passes):
                best = min(best, plan_cost(lengths, passes, overhead))
        plan = plan_batches(lengths, batch_size, budget, overhead)
        assert plan_cost(lengths, plan, overhead) == best


def test_plan_batches_cuts_where_lengths_jump_not_at_the_count():
    lengths = [10] * 20 + [200] * 12
    passes = plan_batches(lengths, batch_size=32, max_batch_tokens=100_000, overhead_tokens=32)
    assert [sorted({lengths[i] for i in p}) for p in passes] == [[10], [200]]


def test_run_isolated_fails_only_the_bad_inputs():
    calls = []

    def run(items: list[int]) -> list[int]:
        calls.append(list(items))
        if 3 in items:
            raise RuntimeError("poison")
        return [i * 10 for i in items]

    results = run_isolated(run, [1, 2, 3, 4, 5])
    assert results[:2] == [10, 20] and results[3:] == [40, 50]
    assert isinstance(results[2], RuntimeError)


def test_truncate_dimensions_renormalizes():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(4, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    short = truncate_dimensions(vectors, 8, renormalize=True)
    np.testing.assert_allclose(np.linalg.norm(short, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(short * np.linalg.norm(vectors[:, :8], axis=1, keepdims=True), vectors[:, :8], atol=1e-6)
    np.testing.assert_array_equal(truncate_dimensions(vectors, 8, renormalize=False), vectors[:, :8])
    assert truncate_dimensions(vectors, None, renormalize=True) is vectors


def test_base64_is_little_endian_float32():
    vector = np.array([1.0, -2.5, 3.25], dtype=np.float32)
    raw = base64.b64decode(to_base64(vector))
    assert raw == vector.astype("<f4").tobytes()
    np.testing.assert_array_equal(np.frombuffer(raw, dtype="<f4"), vector)


@pytest.mark.parametrize("pooling", ["lasttoken", "mean", "cls"])
def test_plain_transformers_checkpoint_with_pooling_setting(tiny_bert_path, pooling):
    import torch
    from transformers import AutoModel

    cfg = ModelConfig(backend="torch", model_id=str(tiny_bert_path), pooling=pooling, normalize=False)
    tokenizer, encoder = TextTokenizer(tiny_bert_path, cfg), TextEncoder(tiny_bert_path, cfg)
    texts = ["short", "a somewhat longer input sentence for padding"]
    ids = tokenizer.encode_texts(texts)
    model = AutoModel.from_pretrained(str(tiny_bert_path)).eval()
    expected = []
    with torch.inference_mode():
        for row in ids:  # one at a time: no padding in the reference
            hidden = model(input_ids=torch.tensor([row])).last_hidden_state[0]
            expected.append({"lasttoken": hidden[-1], "mean": hidden.mean(0), "cls": hidden[0]}[pooling].numpy())
    assert_same_vectors(encoder.forward(TokenizedText.rows("test", ids)), np.stack(expected))
    assert encoder.info.max_input_tokens == 512 and not encoder.info.normalized


@pytest.mark.parametrize("checkpoint", ["minilm_path", "qwen3_embedder_path"])  # right and left padding
def test_span_rows_share_a_pass_with_pooled_rows(checkpoint, request):
    """Late chunking's rows (sums of token states over spans) and plain rows in one padded pass each get what
    they get alone."""
    folder = request.getfixturevalue(checkpoint)
    cfg = ModelConfig(backend="torch", model_id=str(folder), device="cpu")
    tokenizer, encoder = TextTokenizer(folder, cfg), TextEncoder(folder, cfg)
    short, long = tokenizer.encode_texts([" ".join(WORDS[:5]), " ".join(WORDS[:30])])
    rows = [
        TokenizedText(model="m", input_ids=short),
        TokenizedText(model="m", input_ids=long, spans=[(1, 4), (4, len(long) - 1)]),
        TokenizedText(model="m", input_ids=long, normalize=False),
        TokenizedText(model="m", input_ids=short, spans=[(0, 2)]),
    ]
    together = encoder.forward(rows)
    alone = [encoder.forward([row])[0] for row in rows]
    assert [np.shape(output) for output in together] == [
        (encoder.info.dimension,),
        (2, encoder.info.dimension),
        (encoder.info.dimension,),
        (1, encoder.info.dimension),
    ]
    for got, expected in zip(together, alone):
        assert_same_vectors(got, expected)
    assert abs(np.linalg.norm(together[2]) - 1) > 1e-3, "normalize: false kept the raw pooled vector"
    spans_only = encoder.forward([rows[1], rows[3]])
    assert_same_vectors(spans_only[0], alone[1])


@pytest.mark.parametrize("backend", ["onnx", "ctranslate2"])
def test_span_sums_agree_across_backends(backend, minilm, minilm_path):
    """Late chunking reads the transformer's token states, which every text backend gives."""
    tokenizer, torch_encoder = minilm
    ids = tokenizer.encode_texts([" ".join(WORDS[:20])])[0]
    rows = [TokenizedText(model="m", input_ids=ids, spans=[(1, 6), (6, len(ids) - 1)])]
    encoder = TextEncoder(minilm_path, ModelConfig(backend=backend, model_id=MINILM, device="cpu"))
    assert_same_vectors(encoder.forward(rows)[0], torch_encoder.forward(rows)[0])
