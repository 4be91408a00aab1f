"""One stored output as bytes, the same in memory and in Redis: a header (format version, dtype, shape, the
input's token count), then the array's bytes. A value that does not read back whole is a miss."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

FORMAT_VERSION = 1
MAGIC = b"EMBC"
HEADER = struct.Struct("<4sBBBxI")  # magic, version, dtype code, dimensions, (pad), token count
DIMENSION = struct.Struct("<I")
DTYPES: dict[int, np.dtype] = {0: np.dtype("<f4"), 1: np.dtype("<f8"), 2: np.dtype("<f2")}
DTYPE_CODES = {dtype: code for code, dtype in DTYPES.items()}
MAX_DIMENSIONS = 4


@dataclass(frozen=True)
class Entry:
    """An input's output as the model answered it (before any output-only transform), and its tokens."""

    output: np.ndarray
    tokens: int


def encode(entry: Entry) -> bytes | None:
    """The stored form; None for an output no value can hold (a dtype the models never answer)."""
    output = entry.output
    code = DTYPE_CODES.get(output.dtype.newbyteorder("<"))
    if code is None or output.ndim > MAX_DIMENSIONS:
        return None
    shape = b"".join(DIMENSION.pack(size) for size in output.shape)
    header = HEADER.pack(MAGIC, FORMAT_VERSION, code, output.ndim, entry.tokens)
    return header + shape + np.ascontiguousarray(output, dtype=DTYPES[code]).tobytes()


def decode(value: bytes) -> Entry | None:
    """The entry `value` holds, read-only and without a copy; None unless it is whole and of this version."""
    if len(value) < HEADER.size:
        return None
    magic, version, code, ndim, tokens = HEADER.unpack_from(value)
    if magic != MAGIC or version != FORMAT_VERSION or code not in DTYPES or ndim > MAX_DIMENSIONS:
        return None
    start = HEADER.size + ndim * DIMENSION.size
    if len(value) < start:
        return None
    shape = tuple(DIMENSION.unpack_from(value, HEADER.size + i * DIMENSION.size)[0] for i in range(ndim))
    dtype = DTYPES[code]
    if len(value) - start != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        return None
    return Entry(np.frombuffer(value, dtype=dtype, offset=start).reshape(shape), tokens)
