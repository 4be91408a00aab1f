"""Tracebacks in the log keep their frames and types but not the messages that may quote a request
(bento/serving/server_logging.py); BentoML's exception log skips what it answers with a 4xx."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from http import HTTPStatus

import pytest
from bentoml.exceptions import BentoMLException
from pydantic import BaseModel, ValidationError

from bento.serving import server_logging
from config import errors

SECRET = "my private medical note"


class Body(BaseModel):
    dimensions: int


def failing_inference() -> None:
    try:
        raise ValueError(f"cannot tokenize {SECRET!r}")
    except ValueError as exc:
        raise errors.InferenceError("the model failed on an input") from exc


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing through a plain formatter, records made by the factory that withholds messages."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("tests.server_logging")
    logger.addHandler(handler)
    logger.propagate = False
    previous = logging.getLogRecordFactory()
    logging.setLogRecordFactory(server_logging._records_without_messages)
    try:
        yield logger, stream
    finally:
        logging.setLogRecordFactory(previous)
        logger.removeHandler(handler)


def test_a_logged_traceback_keeps_frames_and_types_and_withholds_foreign_messages(captured) -> None:
    logger, stream = captured
    try:
        failing_inference()
    except errors.InferenceError:
        logger.exception("request failed")
    text = stream.getvalue()
    assert SECRET not in text
    assert "failing_inference" in text and "ValueError: " + server_logging.WITHHELD in text
    assert "config.errors.InferenceError: the model failed on an input" in text  # Embento's own message stays
    assert "The above exception was the direct cause" in text


def test_pydantics_message_quoting_the_body_is_withheld(captured) -> None:
    logger, stream = captured
    try:
        Body.model_validate_json(f'{{"dimensions": "{SECRET}"}}')
    except ValidationError:
        logger.error("bad body", exc_info=True)
    assert SECRET not in stream.getvalue()
    assert "pydantic_core._pydantic_core.ValidationError: " + server_logging.WITHHELD in stream.getvalue()


def test_a_record_without_an_exception_is_left_as_it_is(captured) -> None:
    logger, stream = captured
    logger.warning("model '%s' unloaded (%s)", "m", "idle")
    assert stream.getvalue() == "WARNING model 'm' unloaded (idle)\n"


@pytest.mark.parametrize(
    ("exc", "client_error"),
    [
        (BentoMLException("unsupported", error_code=HTTPStatus.UNSUPPORTED_MEDIA_TYPE), True),
        (BentoMLException("broken", error_code=HTTPStatus.INTERNAL_SERVER_ERROR), False),
        (RuntimeError("a bug"), False),
        (None, False),
    ],
)
def test_only_what_bentoml_answers_with_a_4xx_is_a_client_error(exc: BaseException | None, client_error: bool) -> None:
    assert server_logging.is_client_error(exc) is client_error


def test_a_validation_error_is_a_client_error() -> None:
    with pytest.raises(ValidationError) as caught:
        Body.model_validate({"dimensions": SECRET})
    assert server_logging.is_client_error(caught.value)
