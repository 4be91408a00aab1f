"""A batch input file read into lines, or refused with OpenAI's `errors.data[]`, each problem on its line."""

from __future__ import annotations

import json

from gateway.jobs.lines import BatchLine, parse_batch_file

ENDPOINT = "/v1/embeddings"


def line(custom_id: str, url: str = ENDPOINT, method: str = "POST", **body) -> str:
    return json.dumps({"custom_id": custom_id, "method": method, "url": url, "body": body or {"input": "x"}})


def test_lines_keep_their_numbers_and_compact_bodies_blank_lines_skipped():
    content = "\n".join([line("a", input="one"), "", line("b", input=["two", "three"]), ""]).encode()
    assert parse_batch_file(content, ENDPOINT, 10) == (
        [BatchLine(1, "a", '{"input":"one"}'), BatchLine(3, "b", '{"input":["two","three"]}')],
        [],
    )


def test_each_problem_names_its_code_field_and_line():
    content = "\n".join(
        [
            line("a"),
            "{not json",
            line("a"),
            line("c", url="/v1/rerank"),
            line("d", method="GET"),
            json.dumps({"custom_id": "e", "method": "POST", "url": ENDPOINT}),
            "[1, 2]",
            json.dumps({"method": "POST", "url": ENDPOINT, "body": {}}),
        ]
    ).encode()
    _, problems = parse_batch_file(content, ENDPOINT, 10)
    assert [(p["code"], p["param"], p["line"]) for p in problems] == [
        ("invalid_json_line", None, 2),
        ("duplicate_custom_id", "custom_id", 3),
        ("invalid_url", "url", 4),
        ("invalid_method", "method", 5),
        ("missing_required_parameter", "body", 6),
        ("invalid_json_line", None, 7),
        ("missing_required_parameter", "custom_id", 8),
    ]
    assert "'a'" in problems[1]["message"] and "/v1/rerank" in problems[2]["message"]


def test_an_integer_past_pythons_digit_limit_is_a_problem_on_its_line_not_a_crash():
    content = "\n".join([line("a"), '{"custom_id": "b", "body": {"input": ' + "1" * 5000 + "}}"]).encode()
    _, problems = parse_batch_file(content, ENDPOINT, 10)
    assert [(p["code"], p["line"]) for p in problems] == [("invalid_json_line", 2)]
    assert "4300 digits" in problems[0]["message"]


def test_too_many_lines_an_empty_file_and_bytes_that_are_not_utf8_fail_the_batch():
    assert [
        p["code"] for p in parse_batch_file("\n".join(line(str(i)) for i in range(3)).encode(), ENDPOINT, 2)[1]
    ] == ["too_many_requests"]
    assert [p["code"] for p in parse_batch_file(b"\n\n", ENDPOINT, 2)[1]] == ["empty_file"]
    assert [p["code"] for p in parse_batch_file(b"\xff\xfe", ENDPOINT, 2)[1]] == ["invalid_file_encoding"]
