"""A batch input file read into its lines, or the problems that fail the batch at validation, each with its
line number, as OpenAI reports them (`errors.data[]`: code, message, param, line)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_REPORTED_PROBLEMS = 100


@dataclass(frozen=True)
class BatchLine:
    number: int  # 1-based
    custom_id: str
    body: str  # the request body, JSON


def parse_batch_file(content: bytes, endpoint: str, max_lines: int) -> tuple[list[BatchLine], list[dict[str, Any]]]:
    """Every request line of the file (blank lines skipped), and its problems: malformed JSON, a missing or
    repeated `custom_id`, a method other than POST, a `url` other than the batch's `endpoint`, no `body` object;
    too many lines, or none."""
    lines: list[BatchLine] = []
    problems: list[dict[str, Any]] = []
    seen: set[str] = set()
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return [], [problem("invalid_file_encoding", "the file is not UTF-8 text", None, None)]
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        parsed, found = _request(raw, number, endpoint, seen)
        if found:
            problems.append(found)
        elif parsed:
            lines.append(parsed)
    if not lines and not problems:
        problems.append(problem("empty_file", "the file holds no request", None, None))
    if len(lines) > max_lines:
        problems.append(
            problem(
                "too_many_requests",
                f"the file holds {len(lines)} requests; a batch takes at most {max_lines} (jobs.max_lines)",
                None,
                None,
            )
        )
    return lines, problems[:MAX_REPORTED_PROBLEMS]


def _request(raw: str, number: int, endpoint: str, seen: set[str]) -> tuple[BatchLine | None, dict | None]:
    try:
        request = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, or an integer past Python's 4,300 digits (a plain ValueError)
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return None, problem("invalid_json_line", f"line {number} is not valid JSON: {reason}", None, number)
    if not isinstance(request, dict):
        return None, problem("invalid_json_line", f"line {number} is not a JSON object", None, number)
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return None, problem(
            "missing_required_parameter", "each request needs a string `custom_id`", "custom_id", number
        )
    if custom_id in seen:
        return None, problem(
            "duplicate_custom_id", f"the custom_id '{custom_id}' is used by an earlier line", "custom_id", number
        )
    seen.add(custom_id)
    if request.get("method") != "POST":
        return None, problem("invalid_method", "the method must be POST", "method", number)
    if request.get("url") != endpoint:
        return None, problem(
            "invalid_url", f"the url '{request.get('url')}' is not the batch's endpoint '{endpoint}'", "url", number
        )
    if not isinstance(request.get("body"), dict):
        return None, problem("missing_required_parameter", "each request needs a `body` object", "body", number)
    return BatchLine(number, custom_id, json.dumps(request["body"], separators=(",", ":"))), None


def problem(code: str, message: str, param: str | None, line: int | None) -> dict[str, Any]:
    """One of `errors.data[]`."""
    return {"code": code, "message": message, "param": param, "line": line}
