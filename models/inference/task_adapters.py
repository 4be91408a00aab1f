"""A base model and every task's peft LoRA adapter, loaded once into one `PeftModel`, and the rows of a pass
run through each row's own adapter.

How rows of different tasks share a pass: they do not. A pass's rows are grouped by task and each group runs
as a pass of its own, under `set_adapter` (rows with no task under `disable_adapter`: the base model alone).
peft's mixed-adapter batches (`adapter_names=` per row) would run the base weights once and split only the
LoRA products by row, also exactly; but they reach the LoRA layers only through `PeftModel.forward`'s own
arguments, and sentence-transformers' Transformer module calls the model with its features alone. The pool
groups rows by task before it cuts passes (`runners.pool`), so a mixed load costs whole passes per task, not
split ones; grouping here keeps every pass exact whatever its caller sends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

Row = TypeVar("Row")
Output = TypeVar("Output")


class TaskAdapters:
    """The task adapters of one model, injected into its transformer in place."""

    def __init__(self, model: Any, adapters: dict[str, Path]) -> None:  # model: transformers.PreTrainedModel
        from peft import PeftModel

        first, *others = adapters.items()
        self._peft = PeftModel.from_pretrained(model, str(first[1]), adapter_name=first[0])
        for task, path in others:
            self._peft.load_adapter(str(path), adapter_name=task)
        self._peft.eval()
        self.tasks = list(adapters)

    def run_by_task(
        self, rows: Sequence[Row], task_of: Callable[[Row], str | None], run: Callable[[list[Row]], list[Output]]
    ) -> list[Output]:
        """`run` over each task's rows under that task's adapter; the outputs in the rows' order."""
        groups: dict[str | None, list[int]] = {}
        for index, row in enumerate(rows):
            groups.setdefault(task_of(row), []).append(index)
        outputs: list[Any] = [None] * len(rows)
        for task, indices in groups.items():
            with self.under(task):
                for index, output in zip(indices, run([rows[i] for i in indices])):
                    outputs[index] = output
        return outputs

    def under(self, task: str | None) -> AbstractContextManager[Any]:
        """The model runs through this task's adapter (None: through none) while in this context."""
        if task is None:
            return self._peft.disable_adapter()
        if task not in self.tasks:
            raise KeyError(f"no task adapter '{task}' (the model has {self.tasks})")
        self._peft.set_adapter(task)
        return nullcontext()
