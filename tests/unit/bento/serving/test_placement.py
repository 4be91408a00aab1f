"""Where things run on the machine they are given: gateway workers, GPU shares and devices per worker, pass
limits sized for the device, and the launched (pipelined) passes of a model on a GPU. Devices, GPU counts
and memory sizes are given as numbers here; the code reads them from NVML and torch on a real machine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bento.serving.placement import Placement, default_gateway_workers, gateway_workers, place_service, worker_device
from config.settings import EmbentoConfig, ModelConfig
from models.base import ModelInfo, TokenizedText
from models.batching import CPU_LIMITS, GPU_MAX_LIMITS, BatchLimits, activation_bytes_per_token, batch_limits

GIB = 2**30
AUTO, ON_CPU, ON_GPU1 = ModelConfig(), ModelConfig(device="cpu"), ModelConfig(device="cuda:1")


@pytest.mark.parametrize(
    ("cores", "gpus", "model", "expected"),
    [
        (2, 0, AUTO, 1),  # this machine: the model services need the cores
        (32, 0, AUTO, 4),  # a CPU server: one per 8 cores
        (16, 1, AUTO, 8),  # a GPU server: the cores the GPU's service leaves, at most 8
        (4, 1, AUTO, 2),
        (8, 2, AUTO, 4),
        (16, 1, ON_CPU, 2),  # GPUs that no model uses do not count
    ],
)
def test_gateway_workers_default_from_cores_and_gpus(cores, gpus, model, expected):
    assert default_gateway_workers(cores, gpus, [model]) == expected


def test_gateway_workers_as_configured():
    assert gateway_workers(EmbentoConfig(gateway_workers=3), cores=64, gpus=8) == 3
    assert gateway_workers(EmbentoConfig(), cores=16, gpus=1) == 8


@pytest.mark.parametrize(
    ("models", "services", "gpus", "accel", "expected"),
    [
        ([AUTO], 1, 2, "cuda", Placement(2, workers=2)),  # one worker per GPU
        ([AUTO], 2, 4, "cuda", Placement(2, workers=2)),
        ([AUTO], 2, 1, "cuda", Placement(0.5)),  # two services share the GPU
        ([AUTO], 3, 2, "cuda", Placement(0.5)),
        ([AUTO], 1, 0, "cuda", Placement(1)),  # a CUDA Bento built where no GPU is: one per replica
        ([AUTO], 1, 0, "cpu", Placement(None)),
        ([ON_CPU], 1, 2, "cpu", Placement(None)),
        ([ON_GPU1], 1, 2, "cuda", Placement(None)),  # `cuda:1` means that GPU: nothing renumbers them
        ([AUTO, ModelConfig(device="cuda:0")], 1, 2, "cuda", Placement(None)),
    ],
)
def test_gpu_shares_and_workers_per_model_service(models, services, gpus, accel, expected):
    assert place_service(models, services, gpus, accel) == expected


def test_each_worker_takes_its_own_gpu():
    assert [worker_device("auto", index, workers=4) for index in (1, 2, 3, 4)] == [
        "cuda:0",
        "cuda:1",
        "cuda:2",
        "cuda:3",
    ]
    assert worker_device("cuda", 2, workers=2) == "cuda:1"
    assert worker_device("auto", 1, workers=1) == "auto"  # one worker: the GPU BentoML gave it
    assert worker_device("cpu", 2, workers=2) == "cpu"
    assert worker_device("auto", None, workers=2) == "auto"  # outside BentoML's arbiter


def test_model_services_get_one_worker_per_gpu_each_on_its_own_index(monkeypatch):
    """Through the model service's own settings, as `runners/model_services.py` and `pool_for` read them."""
    from bentoml._internal.context import server_context

    import runners.service_config as settings

    model = ModelConfig(model_id="m", kind="embed")
    monkeypatch.setattr(settings, "visible_gpus", lambda: 2)
    monkeypatch.setattr(settings, "served_config", lambda: EmbentoConfig(models=[model]))
    service = settings.model_service_config("TextEmbedder")
    assert service["workers"] == 2 and service["resources"] == {"gpu": 2}
    devices = []
    for index in (1, 2):
        monkeypatch.setattr(server_context, "worker_index", index)
        devices += [cfg.device for cfg in settings.placed([model], "TextEmbedder")]
    assert devices == ["cuda:0", "cuda:1"]
    assert settings.dispatch_max_rows() == 4 * GPU_MAX_LIMITS.batch_size  # rows per call for GPU-sized passes


def _config_json(folder: Path, **fields: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(fields))
    return folder


def test_pass_limits_on_cpu_are_as_before():
    assert batch_limits(None, None, "cpu") == CPU_LIMITS == BatchLimits(32, 16384)
    assert batch_limits(None, None, "mps") == CPU_LIMITS  # no memory figure: as on CPU


def test_pass_limits_on_a_gpu_follow_its_memory_and_the_model(tmp_path):
    minilm = activation_bytes_per_token(_config_json(tmp_path / "minilm", hidden_size=384, num_attention_heads=12), 2)
    large = activation_bytes_per_token(_config_json(tmp_path / "large", hidden_size=1024, num_attention_heads=16), 2)
    assert minilm == 2 * (12 * 384 + 12 * 512) and large == 2 * (12 * 1024 + 16 * 512)
    assert batch_limits(None, None, "cuda:0", 80 * GIB, minilm) == GPU_MAX_LIMITS  # an H100: the bounds
    small_gpu = batch_limits(None, None, "cuda:0", 1 * GIB, large)  # 1 GiB free: what a quarter of it holds
    assert small_gpu.max_batch_tokens == GIB // 4 // large and small_gpu.batch_size == small_gpu.max_batch_tokens // 64
    assert batch_limits(None, None, "cuda", GIB // 64, large).max_batch_tokens == 4096  # never below the floor
    assert batch_limits(16, None, "cuda:0", 80 * GIB, minilm) == BatchLimits(16, 65536)  # configured wins


def test_a_multimodal_checkpoint_is_sized_by_its_text_tower(tmp_path):
    folder = _config_json(tmp_path / "clip", text_config={"hidden_size": 512, "num_attention_heads": 8})
    assert activation_bytes_per_token(folder, 4) == 4 * (12 * 512 + 8 * 512)


class _Pending:
    def __init__(self, log: list, label: int, outputs: np.ndarray | None) -> None:
        self.log, self.label, self.outputs = log, label, outputs

    def wait(self) -> np.ndarray:
        self.log.append(("wait", self.label))
        if self.outputs is None:
            raise RuntimeError("the device failed")
        return self.outputs


class _LaunchingModel:
    """A model on a 'GPU' that launches passes; the first id of a row is its value, 13 fails on the device."""

    def __init__(self, folder: Path, cfg: ModelConfig) -> None:
        self.log: list = []
        self.info = ModelInfo(
            served_model_name=cfg.served_model_name,
            model_id=cfg.model_id,
            kind="embed",
            modalities=["text"],
            backend="torch",
            dimension=1,
            max_input_tokens=64,
            normalized=False,
            device="cuda:0",
            dtype="float32",
        )

    def launch(self, rows: list[TokenizedText]) -> _Pending:
        self.log.append(("launch", len(rows)))
        values = np.array([[row.input_ids[0]] for row in rows], dtype=np.float32)
        return _Pending(self.log, len(self.log), None if 13 in values else values)

    def forward(self, rows: list[TokenizedText]) -> np.ndarray:
        self.log.append(("forward", len(rows)))
        if any(row.input_ids[0] == 13 for row in rows):
            raise RuntimeError("input 13 fails")
        return np.array([[row.input_ids[0]] for row in rows], dtype=np.float32)


def _pool(tmp_path: Path):
    from runners.pool import ModelPool

    # an empty folder, whose kind is configured (detection refuses a folder without config.json)
    cfg = ModelConfig(model_id=str(tmp_path), served_model_name="m", kind="embed", batch_size=2, max_batch_tokens=1000)
    pool = ModelPool(_LaunchingModel, [cfg])
    return pool, pool.models["m"]


def test_a_gpu_model_has_every_pass_launched_before_the_first_wait(tmp_path):
    pool, model = _pool(tmp_path)
    rows = TokenizedText.rows("m", [[value] for value in (5, 1, 4, 2, 3, 6)])
    outputs = pool._run_rows(rows)
    assert [float(output[0]) for output in outputs] == [5, 1, 4, 2, 3, 6]  # request order
    kinds = [entry[0] for entry in model.log]
    assert kinds == ["launch"] * 3 + ["wait"] * 3  # three passes of two, queued, then one wait each


def test_a_pass_failing_on_the_device_runs_again_alone_bisected(tmp_path):
    from runners.pool import FAILED

    pool, model = _pool(tmp_path)
    rows = TokenizedText.rows("m", [[value] for value in (1, 13, 2, 3)])
    outputs = pool._run_rows(rows)
    assert outputs[1] is FAILED and [float(outputs[i][0]) for i in (0, 2, 3)] == [1, 2, 3]
    assert ("forward", 2) in model.log and ("forward", 1) in model.log  # the failed pass, then its halves


def test_transfers_on_cpu_are_plain_copies():
    import torch

    from models.inference.transfer import Ready, to_device, to_host

    host = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    for non_blocking in (False, True):  # pinned staging is for CUDA only; on CPU both are a plain copy
        moved = to_device(host, "cpu", torch.float16, non_blocking)
        assert moved.dtype == torch.float16 and moved.tolist() == host.tolist()
    back = to_host(moved.float())
    assert isinstance(back, Ready) and np.array_equal(back.wait(), host.numpy())
