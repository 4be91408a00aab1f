"""ONNX Runtime in place of the torch model inside a sentence-transformers Transformer module.

The module keeps its tokenizer, settings and output routing, and the modules after it (Pooling, Dense,
Normalize, a CrossEncoder's activation) keep running as the checkpoint declares them: one pooling
implementation for every backend, as with CTranslate2 (`models.inference.ctranslate2_encoder`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from models.inference.onnx_export import TASK_OUTPUTS


class OnnxTransformerModel(torch.nn.Module):
    """A transformers model's forward for the padded batch tensors, answered by an ONNX Runtime session on
    its export: `last_hidden_state` (feature extraction) or `logits` (sequence classification)."""

    def __init__(self, file: Path, config: Any, task: str, device: str, options: Any, providers: list[Any]) -> None:
        import onnxruntime

        super().__init__()
        self.config = config  # what sentence-transformers reads of the model besides its forward
        self._session = onnxruntime.InferenceSession(str(file), options, providers=providers)
        self._inputs = [tensor.name for tensor in self._session.get_inputs()]
        self._output = TASK_OUTPUTS[task]
        self._device = torch.device(device)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        **_: Any,
    ) -> dict[str, torch.Tensor]:
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        feeds = {name: _host(given.get(name), input_ids) for name in self._inputs}
        output = self._session.run(None, feeds)[0]
        return {self._output: torch.from_numpy(output).to(self._device)}


def _host(tensor: torch.Tensor | None, input_ids: torch.Tensor) -> Any:
    """An input as ONNX Runtime takes it. A graph exported with segment ids (a shipped export) gets zeros for
    single texts, as the tokenizer would give them."""
    if tensor is None:
        tensor = torch.zeros_like(input_ids)
    return tensor.to(torch.int64).cpu().numpy()
