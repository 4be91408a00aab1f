"""How a failure escaping `bentoml serve`'s own process is printed (bento/serving/start_failures.py); the servers
that fail to start are in tests/server/test_faults.py and tests/packaging/test_bento.py."""

from __future__ import annotations

import pytest
from bentoml.exceptions import ImportServiceError

from bento.serving.start_failures import PREFIX, _print_start_failure
from config.errors import ConfigError


def raised(exc: BaseException) -> BaseException:
    """`exc` raised as BentoML's fallback to a Bento tag raises it: while handling its first try, which imported
    the client package `embento` as the module."""
    try:
        try:
            raise ImportServiceError('Attribute "0.1.0-cpu" not found in module "embento".')
        except ImportServiceError:
            raise exc  # noqa: B904 - as BentoML does
    except BaseException as escaped:  # noqa: BLE001
        return escaped


@pytest.fixture(autouse=True)
def not_debug(monkeypatch):
    for name in ("BENTOML_VERBOSITY", "BENTOML_DEBUG"):
        monkeypatch.delenv(name, raising=False)


def test_a_known_error_is_one_line(capsys):
    exc = raised(ConfigError("this Bento needs ['ClapEmbedder'] too"))
    _print_start_failure(type(exc), exc, exc.__traceback__)
    assert capsys.readouterr().err == f"{PREFIX}this Bento needs ['ClapEmbedder'] too\n"


def test_an_unexpected_error_keeps_its_traceback_without_the_client_package_try(capsys):
    exc = raised(RuntimeError("a bug"))
    _print_start_failure(type(exc), exc, exc.__traceback__)
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.endswith("RuntimeError: a bug\n")
    assert "embento" not in err and "ImportServiceError" not in err


def test_at_debug_level_everything_is_shown(capsys, monkeypatch):
    monkeypatch.setenv("BENTOML_DEBUG", "true")
    exc = raised(ConfigError("refused"))
    _print_start_failure(type(exc), exc, exc.__traceback__)
    err = capsys.readouterr().err
    assert 'not found in module "embento"' in err and err.endswith("config.errors.ConfigError: refused\n")
