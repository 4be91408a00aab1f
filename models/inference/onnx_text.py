"""What the torch-free text classes on ONNX Runtime share (`onnx_encoder`, `onnx_scorer`, `onnx_colbert`): the
export's session, the tokenizer's padding read from its files, and the text window read from the files as
written, each without importing torch, transformers' model code or sentence-transformers.

transformers' `AutoConfig` imports torch wherever torch is installed (`configuration_utils` imports
`modeling_rope_utils`, which imports it): torch alone took 1.8 s of `-X importtime` on a 2-core Intel Xeon.
So the window is read from `config.json` as written here, and a checkpoint whose file leaves out what the
window needs raises `TorchNeeded`, for the torch-backed class to read it through transformers as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config.errors import ModelLoadError, one_line
from config.settings import ModelConfig
from models.inference.host import cpu_threads
from models.inference.sentence_head import TorchNeeded
from models.kinds import Kind, spec
from models.preprocessing.text_settings import _DEFAULT_LIMIT, _NO_LIMIT, _PADDING_OFFSET_TYPES, TextSettings
from models.preprocessing.text_settings import read_text_settings as _read_text_settings
from models.resolve import read_json


def open_session(folder: Path, cfg: ModelConfig, kind: Kind) -> Any:  # onnxruntime.InferenceSession
    """The ONNX Runtime session of the checkpoint's export for its kind's task (int8 where configured) on the
    CPU, exporting it first if no start has (torch and transformers' model class, never sentence-transformers:
    `models.inference.onnx_export`)."""
    import onnxruntime

    from models.inference.onnx_runtime import onnx_checkpoint, providers, session_options

    entry, file_name = onnx_checkpoint(folder, spec(kind).onnx_task or "", cfg.dtype == "int8")
    try:
        return onnxruntime.InferenceSession(
            str(entry / file_name), session_options(cpu_threads()), providers=providers("cpu")
        )
    except Exception as exc:  # ONNX Runtime refused the graph
        raise ModelLoadError(f"ONNX Runtime cannot open {entry / file_name}: {one_line(exc)}") from exc


def tokenizer_files(folder: Path) -> tuple[int, bool, int | None]:
    """(pad id, whether it pads on the left, its length limit) as transformers reads them from the tokenizer's
    files, without loading transformers: its pad token (0 where it has none, as `padding.pad_rows` pads)."""
    config = read_json(folder / "tokenizer_config.json")
    pad = token_content(config.get("pad_token") or read_json(folder / "special_tokens_map.json").get("pad_token"))
    vocabulary = fast_tokenizer(folder)
    pad_id = None if pad is None or vocabulary is None else vocabulary.token_to_id(pad)
    limit = config.get("model_max_length")
    return pad_id or 0, config.get("padding_side", "right") == "left", limit if isinstance(limit, int) else None


def token_content(token: Any) -> str | None:
    """A special token as the tokenizer's files write it: a string, or an added token's dict."""
    return token.get("content") if isinstance(token, dict) else token


def fast_tokenizer(folder: Path) -> Any:  # tokenizers.Tokenizer | None
    """The folder's `tokenizer.json` through the `tokenizers` library alone (no transformers); None without one."""
    if not (folder / "tokenizer.json").is_file():
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def read_text_settings(folder: Path, cfg: ModelConfig, tokenizer_max_length: int | None) -> TextSettings:
    """`text_settings.read_text_settings`, the window read from the files as written where neither the
    configuration nor `sentence_bert_config.json` declares it (the module docstring says why)."""
    declared = cfg.max_seq_length or read_json(folder / "sentence_bert_config.json").get("max_seq_length")
    known = None if declared else text_limit_as_written(folder, tokenizer_max_length)
    return _read_text_settings(folder, cfg, tokenizer_max_length, known)


def text_limit_as_written(folder: Path, tokenizer_max_length: int | None) -> int:
    """`text_settings.text_limit` from `config.json` as written: the smaller of the tokenizer's limit and the
    positions the model has, less those its position scheme skips. transformers writes `max_position_embeddings`
    into every text model's file, and `pad_token_id` wherever it differs from the default read here (1);
    a file without the former raises `TorchNeeded`."""
    config = read_json(folder / "config.json")
    positions, model_type, pad_id = (
        config.get("max_position_embeddings"),
        config.get("model_type"),
        config.get("pad_token_id"),
    )
    if positions is None:
        raise TorchNeeded("its config.json leaves its window to transformers' defaults")
    limits = [tokenizer_max_length or _NO_LIMIT]
    if isinstance(positions, int) and positions > 0:  # XLNet's -1: no limit
        offset = (pad_id if pad_id is not None else 1) + 1 if model_type in _PADDING_OFFSET_TYPES else 0
        limits.append(positions - offset)
    limit = min(limits)
    return int(limit) if limit < _NO_LIMIT else _DEFAULT_LIMIT
