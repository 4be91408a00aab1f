"""A start-up failure Embento knows (`config.errors.EmbentoError`: a ConfigError, a ModelLoadError) is told
once, as one line, and the server exits non-zero. Unexpected errors keep one traceback. At BentoML's debug
level (`embento serve --log-level debug`, `bentoml serve --debug`) every traceback is shown, as BentoML
writes them.

Left alone, one failure to load a model showed its reason five times, three of them with a traceback:

- the model service's `stop_server` logged it ("...; stopping the server");
- BentoML logged "Initializing service error" with the traceback, on `bentoml.serve`, as the service's
  constructor raised;
- Starlette handed the same traceback to uvicorn as the lifespan's failure, and uvicorn logged it on
  `uvicorn.error`, a logger to which BentoML gives the handler the root logger has too, and lets propagate:
  twice, each followed by "Application startup failed. Exiting.";
- `bentoml serve`'s own process (the arbiter) printed it as it exited (`exit_nonzero_after_failed_start`).

Now the worker logs it at debug level only, the filters below drop BentoML's and uvicorn's copies of a known
failure (and uvicorn's copy of any failure BentoML logged already), and the arbiter's line is the one left.

A failure while `bentoml serve`'s own process imports the service (an invalid configuration, a Bento asked to
serve a configuration it lacks services for) escapes BentoML's command as a traceback. For `bentoml serve
embento:<version>` it came chained to the ImportServiceError of BentoML's first try: it imports the name as a
module first, finds the installed client package `embento`, fails to find the attribute `<version>` there,
and only then loads the Bento of that name. `report_start_failures` prints a known error as one line instead,
and drops that first try from the traceback of any other, so the fallback is silent.
"""

from __future__ import annotations

import logging
import sys
from types import TracebackType
from typing import TypeGuard

from bentoml._internal.configuration import get_debug_mode
from bentoml.exceptions import ImportServiceError

from config.errors import EmbentoError

START_FAILED = "embento: the server could not start: "  # the arbiter's line, for a worker's failure
PREFIX = "embento: "  # a known error escaping a process: as `embento serve` and `embento build` print theirs
# BentoML's first try at `bentoml serve embento:<version>`: the installed package `embento` as the module.
CLIENT_PACKAGE_TRY = 'module "embento"'
_failed_construction: list[BaseException | None] = []  # what a service's constructor raised in this process


def is_known(exc: BaseException | None) -> TypeGuard[EmbentoError]:
    """A failure whose message says all there is to say: raised by Embento's own checks."""
    return isinstance(exc, EmbentoError)


class _ServiceConstruction(logging.Filter):
    """On `bentoml.serve`: BentoML's "Initializing service error" and its traceback, when the error is known."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.msg == "Initializing service error":
            _failed_construction.append(record.exc_info[1])
            return get_debug_mode() or not is_known(record.exc_info[1])
        return True


class _LifespanFailure(logging.Filter):
    """On `uvicorn.error`: the lifespan's copy of a traceback BentoML logged already, and, for a known failure,
    uvicorn's "Application startup failed" (the arbiter says the server could not start, and why)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _failed_construction or record.levelno < logging.ERROR or get_debug_mode():
            return True
        message = record.getMessage()
        if message.startswith("Traceback (most recent call last)"):
            return False
        return not (message.startswith("Application startup failed") and is_known(_failed_construction[-1]))


def _print_start_failure(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """`sys.excepthook`: a known error escaping the process (`bentoml serve` or `bentoml build` importing the
    service) as one line."""
    if not get_debug_mode():
        if is_known(exc):
            # One line per problem (a configuration refused names each setting on its own line).
            print(
                "".join(f"{PREFIX}{line}\n" for line in exc.message.splitlines()), end="", file=sys.stderr, flush=True
            )
            return
        _hide_client_package_try(exc)
    sys.__excepthook__(kind, exc, tb)


def _hide_client_package_try(exc: BaseException) -> None:
    """Drops BentoML's first try at a Bento tag, importing the package `embento`, from `exc`'s traceback."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        context = current.__context__
        if isinstance(context, ImportServiceError) and CLIENT_PACKAGE_TRY in str(context):
            current.__suppress_context__ = True
            return
        current = current.__cause__ or (None if current.__suppress_context__ else context)


def report_start_failures() -> None:
    """Installs the filters and the hook in this process (each of BentoML's processes imports the service)."""
    for name, filter_type in (("bentoml.serve", _ServiceConstruction), ("uvicorn.error", _LifespanFailure)):
        logger = logging.getLogger(name)
        if not any(isinstance(f, filter_type) for f in logger.filters):
            logger.addFilter(filter_type())
    sys.excepthook = _print_start_failure
