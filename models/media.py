"""Image and audio bytes -> what a processor takes, with the limits a public endpoint needs.

Decoding happens in the gateway, per item, so a corrupt or hostile file fails its own request with a
400 before anything reaches a model service. Those checks stay here, not in `gateway.validation` (whose docstring
lists this module): an image's pixels or a clip's duration and samples are known only once decoded, and `models/`
imports no gateway module.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np

from config.errors import InvalidRequest

MIN_IMAGE_SIDE = 4  # pixels; smaller images carry no content and confuse channel inference


@dataclass(frozen=True)
class MediaLimits:
    max_item_bytes: int
    max_image_pixels: int
    max_audio_seconds: float


def decode_image(data: bytes, limits: MediaLimits, where: str, param: str = "input"):  # -> PIL.Image.Image
    """An RGB image; refuses non-images, truncated files, decompression bombs and degenerate sizes (a 400 naming
    `where`, for the request field `param`)."""
    from PIL import Image, UnidentifiedImageError

    _check_size(data, limits, where, param)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size  # known from the header, before any pixel is decoded
            if width * height > limits.max_image_pixels:
                raise InvalidRequest(
                    f"{where} is {width}x{height} pixels; at most {limits.max_image_pixels} pixels are allowed",
                    param=param,
                )
            image.load()
    except InvalidRequest:
        raise
    except (UnidentifiedImageError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise InvalidRequest(f"{where} is not a readable image ({type(exc).__name__})", param=param) from None
    except (OSError, ValueError, SyntaxError) as exc:  # truncated or corrupt data, raised by the decoders
        raise InvalidRequest(f"{where} is a corrupt or truncated image: {exc}", param=param) from None
    if min(width, height) < MIN_IMAGE_SIDE:
        raise InvalidRequest(
            f"{where} is {width}x{height} pixels; each side must be at least {MIN_IMAGE_SIDE}", param=param
        )
    return image.convert("RGB")


def decode_audio(data: bytes, sampling_rate: int, limits: MediaLimits, where: str, param: str = "input") -> np.ndarray:
    """Mono float32 samples at `sampling_rate` (downmixed, then resampled with librosa's default); an error names
    the item `where`, for the request field `param`."""
    import soundfile

    _check_size(data, limits, where, param)
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as audio:
            seconds = audio.frames / audio.samplerate if audio.samplerate else 0.0
            if seconds > limits.max_audio_seconds:
                raise InvalidRequest(
                    f"{where} lasts {seconds:.1f} s; at most {limits.max_audio_seconds:g} s are allowed", param=param
                )
            samples = audio.read(dtype="float32", always_2d=True)
            source_rate = audio.samplerate
    except InvalidRequest:
        raise
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise InvalidRequest(f"{where} is not readable audio (wav, flac, ogg, mp3): {exc}", param=param) from None
    if samples.shape[0] == 0:
        raise InvalidRequest(f"{where} holds no audio samples", param=param)
    mono = samples.mean(axis=1)
    if source_rate != sampling_rate:
        import librosa

        mono = librosa.resample(mono, orig_sr=source_rate, target_sr=sampling_rate)
    return np.ascontiguousarray(mono, dtype=np.float32)


def _check_size(data: bytes, limits: MediaLimits, where: str, param: str = "input") -> None:
    if not data:
        raise InvalidRequest(f"{where} is empty", param=param)
    if len(data) > limits.max_item_bytes:
        raise InvalidRequest(f"{where} is {len(data)} bytes; at most {limits.max_item_bytes} are allowed", param=param)
