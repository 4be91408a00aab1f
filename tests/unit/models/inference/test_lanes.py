"""One batch shared across the CPU cores: how it is cut, that the parts really run at once, and that the
model service's answers do not change."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from config.settings import ModelConfig
from models.base import TokenizedText
from models.inference.lanes import Lanes, share_out
from models.inference.text_encoder import TextEncoder
from models.preprocessing.text_tokenizer import TextTokenizer
from testkit.sentences import make_sentences
from tests.tolerance import assert_same_vectors


def test_share_out_cuts_runs_of_neighbouring_lengths_with_about_equal_tokens():
    rng = random.Random(5)
    for _ in range(300):
        lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 60))]
        lanes, min_tokens = rng.randint(1, 4), rng.choice([1, 50, 96, 500])
        parts = share_out(lengths, lanes, min_tokens)
        assert sorted(i for part in parts for i in part) == list(range(len(lengths)))
        assert [lengths[i] for part in parts for i in part] == sorted(lengths)  # each part one run of lengths
        assert len(parts) <= max(1, min(lanes, sum(lengths) // min_tokens))
        share = sum(lengths) / len(parts)
        assert all(sum(lengths[i] for i in part) <= share + max(lengths) for part in parts)


def test_share_out_keeps_small_batches_whole():
    assert share_out([14] * 6, lanes=2) == [list(range(6))]  # 84 tokens: not worth two passes
    assert [len(part) for part in share_out([14] * 14, lanes=2)] == [7, 7]
    assert share_out([500], lanes=2) == [[0]]


def test_lanes_run_the_parts_at_the_same_time_and_re_raise_their_errors():
    lanes = Lanes(2)
    both_running = threading.Barrier(2, timeout=10)  # broken unless the two parts overlap
    seen: dict[str, list[int]] = {}

    def work(part: list[int]) -> None:
        both_running.wait()
        seen[threading.current_thread().name] = part

    lanes.run(work, [60] * 8)
    assert len(seen) == 2 and sorted(i for part in seen.values() for i in part) == list(range(8))

    def fail(part: list[int]) -> None:
        if 0 in part:
            raise ValueError("bad part")

    with pytest.raises(ValueError, match="bad part"):
        lanes.run(fail, [60] * 8)


class ThreadRecorder:
    """The real encoder, noting which thread ran each pass."""

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder, self.info, self.threads = encoder, encoder.info, []

    def forward(self, rows: Sequence[TokenizedText]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        return self.encoder.forward(rows)


@pytest.mark.parametrize("backend", ["torch", "onnx", "onnx without torch"])
def test_pool_shares_a_big_batch_across_the_cores_and_answers_the_same(
    request: pytest.FixtureRequest, minilm_path: Path, tiny_bert_path: Path, backend: str
):
    from models.inference.onnx_encoder import OnnxTextEncoder
    from models.inference.onnx_export import exported_checkpoint
    from runners.pool import ModelPool

    path = minilm_path if backend == "torch" else tiny_bert_path  # a tiny checkpoint exports in seconds
    if backend != "torch":
        request.getfixturevalue("cache_dir")
    cfg = ModelConfig(model_id=str(path), served_model_name="m", device="cpu", backend=backend.split()[0])
    if backend == "onnx without torch":  # one session, run by both lanes at once
        exported_checkpoint(path, "feature-extraction")
        recorder = ThreadRecorder(OnnxTextEncoder(path, cfg))
    else:
        recorder = ThreadRecorder(TextEncoder(path, cfg))
    pool = ModelPool(lambda folder, config: recorder, [cfg], threads=2)
    ids = TextTokenizer(path, cfg).encode_texts(make_sentences(50))
    outputs = asyncio.run(pool.run(TokenizedText.rows("m", ids)))

    assert {name.rsplit("_", 1)[0] for name in recorder.threads} == {"lane0", "lane1"}
    for row_ids, output in zip(ids, outputs):
        assert_same_vectors(output, recorder.encoder.forward(TokenizedText.rows("m", [row_ids]))[0])

    recorder.threads.clear()
    asyncio.run(pool.run(TokenizedText.rows("m", ids[:3])))  # too small to split: the torch thread, whole
    assert [name.rsplit("_", 1)[0] for name in recorder.threads] == ["torch"]
