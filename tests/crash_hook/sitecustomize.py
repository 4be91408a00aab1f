"""Test-side only: a fault the crash-recovery test (tests/server/test_batches.py) injects into a real server.

That test puts this folder on the server's PYTHONPATH, which its gateway workers inherit, and names a bulk-job step in
`CRASH_HOOK_JOB_STEP`. Python imports this module at start-up in every process of the server; when
gateway/jobs/leases.py is imported, its `StepLeases` and `ChunkLeases` (the job worker's side of the store) are
wrapped so that the process dies by SIGKILL, as a crashed worker would, at that step:

- `validating`: a batch's lines parsed, before they are stored (`StepLeases.validated`);
- `chunk`: a chunk's lines answered, before its results are stored (`ChunkLeases.store_chunk`), past the first chunk;
- `finalizing`: a batch marked finalizing (`StepLeases.finalizing`), before its output files are made.

Before dying it writes `crash hook: killing this worker at <step>` to standard error (the server's log).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import signal
import sys

STEP = os.environ.get("CRASH_HOOK_JOB_STEP")
STEPS = ("validating", "chunk", "finalizing")


def die(step: str) -> None:
    sys.stderr.write(f"crash hook: killing this worker at {step}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def wrap(module, step: str) -> None:
    steps, chunks = module.StepLeases, module.ChunkLeases
    if step == "validating":
        original = steps.validated

        @functools.wraps(original)
        def validated(self, *args, **kwargs):
            die(step)

        steps.validated = validated
    elif step == "chunk":
        original_store = chunks.store_chunk

        @functools.wraps(original_store)
        def store_chunk(self, chunk, *args, **kwargs):
            if chunk.first_line > 1:  # a batch partway done
                die(step)
            return original_store(self, chunk, *args, **kwargs)

        chunks.store_chunk = store_chunk
    else:
        original_finalizing = steps.finalizing

        @functools.wraps(original_finalizing)
        def finalizing(self, *args, **kwargs):
            if original_finalizing(self, *args, **kwargs):
                die(step)
            return False

        steps.finalizing = finalizing


class WrapLeases(importlib.abc.MetaPathFinder):
    """Finds gateway.jobs.leases as Python would, and wraps its leases once it has run."""

    def find_spec(self, name, path, target=None):
        if name != "gateway.jobs.leases":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            wrap(module, STEP)

        spec.loader.exec_module = exec_module
        return spec


if STEP:
    if STEP not in STEPS:
        raise SystemExit(f"CRASH_HOOK_JOB_STEP={STEP!r}: not one of {STEPS}")
    sys.meta_path.insert(0, WrapLeases())
