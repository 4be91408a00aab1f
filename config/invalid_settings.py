"""A configuration pydantic refused, as one line per setting: where the value came from (an `EMBENTO_*` variable,
the flag that set it, or the file), the value, and what the setting takes. pydantic's own report is four lines per
error, with its internal names and a URL to its docs.

`config.settings.load_config` raises it, with the variables it read.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_core import ErrorDetails

from config.errors import ConfigError

Location = tuple[str | int, ...]


@dataclass(frozen=True)
class Variables:
    """The EMBENTO_* variables load_config read: `tables` maps a section ("models", "cache", ...; "" for the
    top level) to its variables (after `prefix`) and the field each sets."""

    env: Mapping[str, str]
    prefix: str
    tables: Mapping[str, Mapping[str, str]]

    def setting(self, location: Location) -> str | None:
        """The variable that set this setting: the last one read of those that name it (load_config reads them in
        this order, so the last wins), or None where the value came from the file."""
        if len(location) == 3 and location[0] == "models":
            table = self.tables["models"]
        elif len(location) == 2 and location[0] != "models":
            table = self.tables.get(str(location[0]), {})
        elif len(location) == 1:
            table = self.tables[""]
        else:
            return None
        names = [self.prefix + name for name, field in table.items() if field == location[-1]]
        given = [name for name in names if name in self.env]
        return given[-1] if given else None

    def per_model(self, variable: str | None) -> bool:
        """The variable holds one value per model (`a;b`, a trailing `;` allowed), so which model matters."""
        return variable is not None and ";" in self.env[variable].removesuffix(";")


@dataclass(frozen=True)
class Problem:
    """One setting refused."""

    location: Location  # where in the configuration: ("models", 0, "backend"); () for a model's or the whole's check
    variable: str | None  # the EMBENTO_* variable that set it, if one did
    per_model: bool  # that variable holds one value per model (`a;b`), so which model it is matters
    value: str | None  # as given, quoted; None for a secret or a value that is not a scalar
    takes: str | None  # what the setting takes, where the value is not one of them
    detail: str  # otherwise: what is wrong, in the validator's own words

    def line(self, origin: str, labels: Mapping[str, str]) -> str:
        """`labels`: what the caller calls a variable (`embento serve`: the flag given for it)."""
        who = self._who(origin, labels)
        if self.takes is None:
            return f"{who}: {self.detail}" if who else self.detail
        return f"{who} is {self.value or 'not valid'}; it takes {self.takes}"

    def _who(self, origin: str, labels: Mapping[str, str]) -> str:
        if not self.location:
            return ""  # a model's or the whole configuration's own check names what it is about
        if self.variable is None:
            return f"{_dotted(self.location)} in {origin}"
        model = self.location[1] if self.location[0] == "models" else None
        which = f"model {int(model) + 1}" if self.per_model and model is not None else ""
        if self.variable in labels:
            return f"{labels[self.variable]} ({which})" if which else labels[self.variable]
        field = _dotted(self.location[2:] if model is not None else self.location)
        return f"{self.variable} ({field} of {which})" if which else f"{self.variable} ({field})"


class InvalidSettings(ConfigError):
    """The configuration pydantic refused: one line per setting (`lines`); its message is all of them."""

    def __init__(self, problems: Sequence[Problem], origin: str) -> None:
        self.problems = list(problems)
        self.origin = origin  # where a setting no variable set came from: the file, or the Bento's configuration
        super().__init__("\n".join(self.lines()))

    def lines(self, labels: Mapping[str, str] | None = None) -> list[str]:
        """One per setting: a value given once for every model is one line, not one per model."""
        lines = (f"invalid configuration: {problem.line(self.origin, labels or {})}" for problem in self.problems)
        return list(dict.fromkeys(lines))


def invalid_settings(exc: ValidationError, root: type[BaseModel], variables: Variables, origin: str) -> InvalidSettings:
    """`exc`, raised on validating `root` from `origin` and `variables`, as `InvalidSettings`: the first error of
    each setting (where a setting takes several types, pydantic reports one per type)."""
    problems: dict[Location, Problem] = {}
    for error in exc.errors(include_url=False):
        location, annotation, siblings = _walk(root, error["loc"], error["type"] == "extra_forbidden")
        if location not in problems:
            problems[location] = _problem(error, location, annotation, siblings, variables)
    return InvalidSettings(list(problems.values()), origin)


def _walk(root: type[BaseModel], loc: Location, extra: bool) -> tuple[Location, Any, list[str]]:
    """The part of `loc` that names settings (pydantic appends the type it tried, e.g. `int`), the annotation of
    the last one, and the settings beside it (for a key that is none, its close matches)."""
    kept: list[str | int] = []
    annotation: Any = root
    siblings: list[str] = []
    for part in loc:
        model = _model_in(annotation)
        if isinstance(part, int) and typing.get_origin(annotation) in (list, tuple):
            kept.append(part)
            annotation = (typing.get_args(annotation) or (Any,))[0]
        elif model is not None and isinstance(part, str) and part in model.model_fields:
            kept.append(part)
            siblings = list(model.model_fields)
            annotation = model.model_fields[part].annotation
        elif extra and part == loc[-1] and model is not None:
            return (*kept, part), None, list(model.model_fields)
        else:
            break
    return tuple(kept), annotation, siblings


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The settings model an annotation holds (`CacheSettings`, `ModelConfig | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, (_model_in(member) for member in typing.get_args(annotation))), None)


def _dotted(location: Location) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text


def _problem(
    error: ErrorDetails, location: Location, annotation: Any, siblings: list[str], variables: Variables
) -> Problem:
    if location and not isinstance(location[-1], str):
        location = ()  # a model's own check (its dtype against its backend): its message names the model
    variable = variables.setting(location)
    per_model = variables.per_model(variable)
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(location[-1]), siblings, n=1)
        detail = "not a setting" + (f" (did you mean {close[0]}?)" if close else "")
        return Problem(location, None, False, None, None, detail)
    if kind == "missing":
        return Problem(location, variable, per_model, None, None, "required, and not given")
    value = None if _secret(annotation) else _shown(error["input"])
    detail = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return Problem(location, variable, per_model, value, _takes(kind, ctx), detail)


# What a setting takes, by pydantic's error type (its ctx fills the blanks).
TAKES = {
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "string_type": "text",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping of its settings",
    "model_attributes_type": "a mapping of its settings",
    "greater_than_equal": "{ge} or more",
    "greater_than": "more than {gt}",
    "less_than_equal": "{le} or less",
    "less_than": "less than {lt}",
    "too_short": "at least {min_length} entries",
    "too_long": "at most {max_length} entries",
    "string_pattern_mismatch": "text matching {pattern}",
}


def _takes(kind: str, ctx: Mapping[str, Any]) -> str | None:
    if kind in ("literal_error", "enum"):
        return str(ctx.get("expected", "")).replace("'", "")  # "'a', 'b' or 'c'" -> "a, b or c"
    template = TAKES.get(kind)
    return template.format(**ctx) if template else None


def _secret(annotation: Any) -> bool:
    """A setting holding secrets (API keys, URLs that may carry a password) is never echoed."""
    return annotation is SecretStr or any(_secret(member) for member in typing.get_args(annotation))


def _shown(value: Any) -> str | None:
    """A scalar as given (a long text cut); None for anything else (a mapping where a number belongs)."""
    if isinstance(value, str):
        return f"'{value}'" if len(value) <= 200 else f"'{value[:200]}…'"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int | float) else None
