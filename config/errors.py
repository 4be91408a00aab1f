"""The one error hierarchy, under every package (config/ is the bottom layer) so each raises it;
`gateway/error_responses.py` maps it to HTTP. Each class names what went wrong."""

from __future__ import annotations


class EmbentoError(Exception):
    """Base class: a failure with a message that is safe to show to the caller."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(EmbentoError):
    """The request is malformed or asks for something the model cannot do."""


class InvalidInput(InvalidRequest):
    """One input refused by a layer that knows it only by its position among the inputs it was given (a
    tokenizer): the gateway, which knows the body, names its place there (`gateway.inputs.rows`); until then the
    message reads `input[index] ...`."""

    def __init__(self, index: int, problem: str) -> None:
        super().__init__(f"input[{index}] {problem}", param="input")
        self.index = index
        self.problem = problem


class UnsupportedMediaType(InvalidRequest):
    """The body is not JSON."""


class RequestTooLarge(EmbentoError):
    """The request body is larger than the configured limit."""


class UnknownModel(EmbentoError):
    """The request names a model that is not served."""


class RouteNotFound(EmbentoError):
    """No route at this path (or not for this method)."""


class NotFound(EmbentoError):
    """The request names a file or batch that does not exist (or no longer does)."""


class Unauthorized(EmbentoError):
    """Missing or wrong API key."""


class Forbidden(EmbentoError):
    """A valid key, but not one for this route (a tenant's key on the admin API)."""


class Conflict(EmbentoError):
    """The change asked for does not fit the server's state (an alias onto a model not loaded)."""


class Overloaded(EmbentoError):
    """The server cannot take more work right now; the client should retry later."""


class RateLimited(EmbentoError):
    """The caller's API key is over one of its limits (requests or tokens per minute, concurrency)."""


class NotReady(EmbentoError):
    """Models are still loading or warming up."""


class ConfigError(EmbentoError):
    """The configuration is invalid; raised at startup, before anything is served."""


class ModelLoadError(EmbentoError):
    """A checkpoint could not be found or loaded."""


class InferenceError(EmbentoError):
    """The model failed on an input (a bug or a resource problem, not the caller's fault)."""


class RequestTimeout(EmbentoError):
    """The request did not finish within its deadline."""


class ClientGone(EmbentoError):
    """The client disconnected before its answer was ready; nobody reads the response."""


class ModelUnavailable(EmbentoError):
    """The request names a configured model that failed to load (the others serve, with allow_partial)."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """A library's exception as one line of a load error: its type and its first line (exporters and ONNX
    Runtime raise pages of context)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit] if text else ''}"
