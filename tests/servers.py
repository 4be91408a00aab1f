"""Servers the suite shares by configuration, not by test file (issue 64, item 7): a `bentoml serve` costs seconds of
every process's imports whatever it serves, so test files whose tests need the same settings reach one server, each
by its own served names. Each is named by what it serves:

- `minilm_alone_server`: MiniLM alone, with every default (`backend: auto`, so ONNX Runtime): the embed kind's
  start in a server of its own (tests/server/test_kinds.py) and the torch-free model service
  (tests/server/test_torch_free.py).
- `kinds_and_dtypes_server`: every kind, in every CPU dtype the support matrix allows
  (tests/server/test_dtypes.py), beside issue 50's families by their own names (tests/server/test_new_families.py),
  the task-adapter embedder with MiniLM (tests/server/test_task_adapters.py), and CLIP, a cross-encoder and BGE-M3
  cached in memory (tests/server/test_cache.py). Only per-model settings differ.
- `text_families_server`: text checkpoints from elsewhere, with every default but per-model ones: the former
  remote-code families (tests/server/test_detection.py), the library majors' saves
  (tests/server/test_library_majors.py) and the long-input checkpoints (tests/server/test_long_inputs.py).

A fixture here hands out a `SharedServer`, which starts on first use and stops once the last collected test that
uses it is done (so that no more of them run at once than before), or at the session's end. A server whose settings
are its tests' subject (limits, keys, faults, workers, a cache tier) stays its file's own, and so do the other kinds'
starts alone (tests/server/test_kinds.py, test_vl_embed.py, test_vl_rerank.py). Tests on a shared server name
their models, never take the whole model list for theirs, and leave no state another file's test reads (a cached
answer is keyed by its model, and each file's served names are its own).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import MINILM, SERVER_START_TIMEOUT_S, listening_server, wait_ready

# Loads and first exports of every model of the files sharing it, one model service after another: a minute quiet
# here, more on a busy host than one file's server.
START_TIMEOUT_S = 2 * SERVER_START_TIMEOUT_S
# tests/server/test_new_families.py's served names
NEW_VL, NEW_TASKS, NEW_PAGES, NEW_VL_RERANK = "new-vl", "new-tasks", "new-colmodernvbert", "new-vl-rerank"
# tests/server/test_task_adapters.py's
TASKS_MODEL = "tasks-bert"
# tests/server/test_library_majors.py's
MAJORS = ("qwen3-st5", "qwen3-st6", "reranker-st5")


class SharedServer:
    """A production `bentoml serve` of one configuration, started on first use (`listen`, `ready`), stopped by
    `stop` and started again if used after."""

    def __init__(self, folder: Path, config: dict) -> None:
        self.folder, self.config = folder, config
        self._stack: contextlib.ExitStack | None = None
        self._process: subprocess.Popen | None = None
        self._url = ""

    def listen(self) -> str:
        """Its URL once its port is bound (see `listening_server`): another server may start beside it then."""
        if self._stack is None:
            stack = contextlib.ExitStack()
            self._url, self._process = stack.enter_context(listening_server(self.folder, self.config))
            self._stack = stack
        return self._url

    def ready(self) -> tuple[str, int]:
        """(url, pid) once it is ready."""
        url = self.listen()
        assert self._process is not None
        wait_ready(url, self._process, self.folder / "server.log", START_TIMEOUT_S)
        return url, self._process.pid

    @property
    def url(self) -> str:
        return self.ready()[0]

    def stop(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None


SHARED: dict[str, SharedServer] = {}  # fixture name -> its server, once a test asked for it
LAST_USER: dict[str, str] = {}  # fixture name -> the node id of the last collected test that uses it


def shared(name: str, folder: Path, config: dict) -> Iterator[SharedServer]:
    server = SHARED[name] = SharedServer(folder, config)
    try:
        yield server
    finally:
        server.stop()
        SHARED.pop(name, None)


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        for name in getattr(item, "fixturenames", ()):
            if name in SHARED_FIXTURES:
                LAST_USER[name] = item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """After its last test (the module fixtures that hold its clients are torn down by then), a shared server stops."""
    for name, nodeid in LAST_USER.items():
        if nodeid == item.nodeid and name in SHARED:
            SHARED[name].stop()


@pytest.fixture(scope="session")
def minilm_alone_server(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Iterator[SharedServer]:
    """MiniLM alone with every default. `backend: auto` serves it on ONNX Runtime without torch once its export
    and parity verdict exist, as a Bento's build or an earlier start leaves them: made here first, in the
    session's export cache, whichever of its tests comes first."""
    from config.settings import ModelConfig
    from models.inference.auto_backend import check_export

    check_export(minilm_path, ModelConfig(model_id=MINILM), "embed")
    yield from shared(
        "minilm_alone_server", tmp_path_factory.mktemp("minilm-alone"), {"models": [{"model_id": MINILM}]}
    )


@pytest.fixture(scope="session")
def kinds_and_dtypes_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, task_adapter_path: Path
) -> Iterator[SharedServer]:
    from tests.server.test_cache import media_and_reranker_models
    from tests.server.test_dtypes import dtype_models

    vl_embedder, vl_reranker, pages = (
        request.getfixturevalue(name) for name in ("vl_embedder_path", "vl_reranker_path", "tiny_colmodernvbert_path")
    )
    models = [
        *dtype_models(request),  # the float32 exports are the main server's, in the session's export cache
        {"model_id": str(vl_embedder), "served_model_name": NEW_VL},
        {"model_id": str(vl_reranker), "served_model_name": NEW_VL_RERANK},
        {"model_id": str(task_adapter_path), "served_model_name": NEW_TASKS},
        {"model_id": str(pages), "served_model_name": NEW_PAGES},
        {"model_id": str(task_adapter_path), "served_model_name": TASKS_MODEL, "cache": True},  # backend: auto
        {"model_id": MINILM},
        *media_and_reranker_models(request),
    ]
    yield from shared("kinds_and_dtypes_server", tmp_path_factory.mktemp("kinds-and-dtypes"), {"models": models})


@pytest.fixture(scope="session")
def text_families_server(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    native_family_paths: dict[str, Path],
    majors,
) -> Iterator[SharedServer]:
    from tests.server.test_long_inputs import long_input_models

    majors_paths = (majors.qwen3_st5, majors.qwen3_st6, majors.reranker_st5)
    models = [
        *({"model_id": str(path), "served_model_name": family} for family, path in native_family_paths.items()),
        *({"model_id": str(path), "served_model_name": name} for name, path in zip(MAJORS, majors_paths)),
        *long_input_models(request),
    ]
    yield from shared("text_families_server", tmp_path_factory.mktemp("text-families"), {"models": models})


SHARED_FIXTURES = {"minilm_alone_server", "kinds_and_dtypes_server", "text_families_server"}
