"""What a server's processes log (docs/operations.md, "Logs"): Embento's own lines from INFO up, and never a
request's content.

A request's content (texts, images, audio, token ids, documents, queries) must reach no log line, at any level.
Two paths carried it there, both through exceptions:

- BentoML logs every exception an API raises with its traceback (`log_exception`), a client's mistake included:
  a body that fails validation was an ERROR of ~23 lines, and pydantic's message quotes the body
  (`input_value=[{'text': ...}]`). A client error is answered in its route's shape and counted in the metrics;
  with `log.access: json` it has its access-log line. It is not the server's error, so it is not logged.
- Any traceback: an exception's message may quote what it was given (pydantic's, a tokenizer's, the model's).
  Every log record's traceback keeps its frames and exception types, and withholds the messages of exceptions
  other than Embento's own (`EmbentoError`, whose messages are written for the client and never quote its
  content), unless `log.request_content` opts in, for debugging on data that may be shown.

The rest of the promise is the code's own: Embento's log lines name models, counts and reasons, never inputs
(tests/server/test_log_privacy.py sends a marker through every route family and reads every process's log).
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any

from bentoml._internal.configuration import get_debug_mode, get_quiet_mode
from pydantic import ValidationError

from config.errors import EmbentoError

WITHHELD = "(message withheld: it may quote a request; log.request_content: true shows it)"
# The bundle's packages: their INFO lines (models loaded and unloaded, admin calls, warm-up) are operators' news.
EMBENTO_LOGGERS = ("gateway", "runners", "models", "bento", "config", "server_state")
_ORIGINAL_FACTORY = logging.getLogRecordFactory()


def configure_server_logging(request_content: bool) -> None:
    """In every process of a server, as service.py is imported (after BentoML has configured its logging)."""
    _set_embento_levels()
    _name_the_component_once_known()
    _log_server_errors_only()
    logging.setLogRecordFactory(_ORIGINAL_FACTORY if request_content else _records_without_messages)


def _set_embento_levels() -> None:
    """BentoML puts the root logger at WARNING and its own at INFO: Embento's own follow BentoML's."""
    level = logging.ERROR if get_quiet_mode() else logging.DEBUG if get_debug_mode() else logging.INFO
    for name in EMBENTO_LOGGERS:
        logging.getLogger(name).setLevel(level)


def _name_the_component_once_known() -> None:
    """BentoML's log lines name their process (`[service:TextEmbedder:1]`) from a cached lookup; a line logged
    while the service is imported, before BentoML has set the names, cached `[:1]` for good. The lookup is cached
    only once it has a service's name."""
    import bentoml._internal.log as bentoml_log
    from bentoml._internal.context import server_context

    cached = getattr(bentoml_log._component_name, "__wrapped_lookup__", bentoml_log._component_name)

    def component_name() -> str:
        name = cached()
        if not server_context.service_name:
            cached.cache_clear()
        return name

    component_name.__wrapped_lookup__ = cached  # type: ignore[attr-defined]
    # BentoML's function replaced in its module, on purpose: its filter looks the name up on every record.
    bentoml_log._component_name = component_name  # type: ignore[assignment]


def _records_without_messages(*args: Any, **kwargs: Any) -> logging.LogRecord:
    """The log-record factory: a record's traceback formatted now, its exceptions' messages withheld. Python's
    `Formatter` writes `exc_text` when it is set instead of formatting `exc_info` again; `exc_info` stays for the
    filters that read the exception (bento/serving/start_failures.py)."""
    record = _ORIGINAL_FACTORY(*args, **kwargs)
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = "".join(withheld_traceback(record.exc_info[1])).rstrip("\n")
    return record


def withheld_traceback(exc: BaseException) -> list[str]:
    """Python's traceback of `exc` and the exceptions chained to it (frames and types), messages withheld."""
    lines: list[str] = []
    seen: set[int] = set()

    def add(current: BaseException) -> None:
        seen.add(id(current))
        if current.__cause__ is not None and id(current.__cause__) not in seen:
            add(current.__cause__)
            lines.append("\nThe above exception was the direct cause of the following exception:\n\n")
        elif (
            current.__context__ is not None and not current.__suppress_context__ and id(current.__context__) not in seen
        ):
            add(current.__context__)
            lines.append("\nDuring handling of the above exception, another exception occurred:\n\n")
        if current.__traceback__ is not None:
            lines.append("Traceback (most recent call last):\n")
            lines.extend(traceback.StackSummary.extract(traceback.walk_tb(current.__traceback__)).format())
        lines.append(f"{_qualified_name(type(current))}: {message_of(current)}\n")

    add(exc)
    return lines


def message_of(exc: BaseException) -> str:
    """An exception's message as a log line may show it: Embento's own, or withheld."""
    return exc.message if isinstance(exc, EmbentoError) else WITHHELD


def _qualified_name(kind: type) -> str:
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _log_server_errors_only() -> None:
    """BentoML's `log_exception`, as its service app calls it from each API's `except` block, logs the server's
    errors only: not a body that failed validation, nor another 4xx BentoML raised."""
    import _bentoml_impl.server.app as service_app

    original: Callable[..., None] = getattr(service_app.log_exception, "__wrapped__", service_app.log_exception)

    def log_exception(request: Any, exc_info: Any = True) -> None:
        if not is_client_error(sys.exc_info()[1]):
            original(request, exc_info)

    log_exception.__wrapped__ = original  # type: ignore[attr-defined]
    service_app.log_exception = log_exception


def is_client_error(exc: BaseException | None) -> bool:
    """What BentoML answers with a 4xx: a body that failed validation, or its own exceptions below 500."""
    from bentoml.exceptions import BentoMLException

    if isinstance(exc, ValidationError):
        return True
    return isinstance(exc, BentoMLException) and exc.error_code.value < 500
