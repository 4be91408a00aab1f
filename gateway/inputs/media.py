"""Media items of a request (data URIs or URLs) -> bytes, and bytes -> processor-ready decoded media.

Its request checks stay here, not in `gateway.validation` (whose docstring lists this module): a data URI's
form, base64 and size are known only as it is decoded."""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import unquote_to_bytes

from config.errors import InvalidRequest
from gateway.inputs.fetch import UrlFetcher

DATA_URI = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?),(?P<data>.*)", re.DOTALL)


def decode_data_uri(uri: str, max_bytes: int, where: str) -> bytes:
    match = DATA_URI.fullmatch(uri)
    if match is None:
        raise InvalidRequest(f"{where} is not a valid data URI (data:<type>;base64,<data>)", param="input")
    data = match["data"]
    if ";base64" in match["params"]:
        if len(data) * 3 // 4 > max_bytes + 3:
            raise InvalidRequest(f"{where} is larger than {max_bytes} bytes", param="input")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest(f"{where} holds invalid base64 data", param="input") from None
    return unquote_to_bytes(data)


async def load_item(item: str, fetcher: UrlFetcher | None, max_bytes: int, where: str) -> bytes:
    """The bytes behind a data URI, or behind an http(s) URL when URL inputs are allowed."""
    if item.startswith("data:"):
        return decode_data_uri(item, max_bytes, where)
    if item.startswith(("http://", "https://")):
        if fetcher is None:
            raise InvalidRequest(
                f"{where} is a URL, and URL inputs are off on this server (allow_url_inputs); send a data URI",
                param="input",
            )
        return await fetcher.fetch(item, where)
    raise InvalidRequest(f"{where} must be a data URI (data:image/png;base64,...) or an http(s) URL", param="input")
