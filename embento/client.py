"""A thin typed client for Embento's HTTP routes: numpy arrays out, the server's errors as exceptions.

It speaks plain HTTP (httpx) and asks for base64 vectors. (BentoML's own `SyncHTTPClient` works against
every route too, but it re-parses responses through schemas it builds from the OpenAPI document and
turns a base64 string into a list of characters.)

    from embento import Client

    with Client("http://localhost:3000") as embento:
        vectors = embento.embed(["a sentence"])                  # (1, dim) float32
        pages = embento.embed_images([open("page.png", "rb").read()], model="colpali")  # list of (n, dim)
        ranking = embento.rerank("query", ["doc a", "doc b"])    # [(index, score), ...] best first
"""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any

import httpx
import numpy as np

Media = bytes | str | Path  # raw bytes, a data URI or http(s) URL, or a local file


class EmbentoClientError(Exception):
    """The server refused or failed a request; `status` and `message` are from its OpenAI-style error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Client:
    def __init__(self, url: str = "http://localhost:3000", api_key: str | None = None, timeout: float = 120) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=url, headers=headers, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def embed(
        self,
        texts: list[str],
        model: str | None = None,
        dimensions: int | None = None,
        prompt_name: str | None = None,
        input_type: str | None = None,
        output_types: list[str] | None = None,
    ) -> Any:
        """One vector per text (a (n, dim) array), or a list of (tokens, dim) arrays for multi-vector models.
        With `output_types` (BGE-M3: any of "dense", "sparse", "colbert"), per text a dict of those: "dense" a
        (dim,) array, "sparse" a {token id: weight} dict, "colbert" a (tokens, dim) array. `input_type`
        ("search_query", "search_document") picks a model's query or document encoding (ColBERT's)."""
        body = {
            "input": texts,
            "model": model,
            "dimensions": dimensions,
            "prompt_name": prompt_name,
            "input_type": input_type,
        }
        if output_types is None:
            return self._embed(body)
        result = self._call("/v1/embeddings", {**body, "output_types": output_types, "encoding_format": "base64"})
        return [_representations(item) for item in result["data"]]

    def embed_images(self, images: list[Media], model: str | None = None) -> Any:
        return self._embed(
            {"input": [_data_uri(image, "image/png") for image in images], "model": model, "modality": "image"}
        )

    def embed_audio(self, clips: list[Media], model: str | None = None) -> Any:
        return self._embed(
            {"input": [_data_uri(clip, "audio/wav") for clip in clips], "model": model, "modality": "audio"}
        )

    def rerank(
        self,
        query: str,
        documents: list[str],
        model: str | None = None,
        top_n: int | None = None,
        raw_scores: bool = False,
        score_mode: str | None = None,
    ) -> list[tuple[int, float]]:
        """(document index, score) pairs, best first; `score_mode` for BGE-M3 (hybrid, dense, sparse, colbert)."""
        body = {
            "query": query,
            "documents": documents,
            "model": model,
            "top_n": top_n,
            "raw_scores": raw_scores,
            "score_mode": score_mode,
        }
        result = self._call("/v1/rerank", body)
        return [(item["index"], item["relevance_score"]) for item in result["results"]]

    def classify(self, texts: list[str], model: str | None = None, raw_scores: bool = False) -> list[dict[str, float]]:
        """Every label's score per text."""
        result = self._call("/v1/classify", {"input": texts, "model": model, "raw_scores": raw_scores})
        return [{item["label"]: item["score"] for item in row} for row in result["data"]]

    def _embed(self, body: dict[str, Any]) -> Any:
        result = self._call("/v1/embeddings", {**body, "encoding_format": "base64"})
        arrays = [_decode(item) for item in result["data"]]
        return arrays if any(a.ndim == 2 for a in arrays) else np.stack(arrays)

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._http.post(path, json={key: value for key, value in body.items() if value is not None})
        if response.status_code != 200:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise EmbentoClientError(response.status_code, message)
        return response.json()


def _decode(item: dict[str, Any]) -> np.ndarray:
    flat = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
    return flat.reshape(item["shape"]) if "shape" in item else flat


def _representations(item: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if "embedding" in item:
        found["dense"] = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
    if "sparse" in item:
        found["sparse"] = dict(zip(item["sparse"]["indices"], item["sparse"]["values"]))
    if "multi_vector" in item:
        flat = np.frombuffer(base64.b64decode(item["multi_vector"]), dtype="<f4")
        found["colbert"] = flat.reshape(item["multi_vector_shape"])
    return found


def _data_uri(media: Media, default_type: str) -> str:
    if isinstance(media, str) and media.startswith(("data:", "http://", "https://")):
        return media
    mime = default_type
    if isinstance(media, (str, Path)):
        mime = mimetypes.guess_type(str(media))[0] or default_type
        media = Path(media).read_bytes()
    return f"data:{mime};base64,{base64.b64encode(media).decode()}"
