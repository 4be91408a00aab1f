"""Test media made here: images with PIL, audio with numpy and soundfile, as bytes and data URIs."""

from __future__ import annotations

import base64
import io

import numpy as np


def image_bytes(width: int = 48, height: int = 40, mode: str = "RGB", fmt: str = "PNG", seed: int = 0) -> bytes:
    from PIL import Image

    pixels = (np.random.default_rng(seed).random((height, width, 3)) * 255).astype("uint8")
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, fmt)
    return buffer.getvalue()


def audio_bytes(rate: int = 16000, seconds: float = 1.0, channels: int = 1, fmt: str = "WAV", seed: int = 0) -> bytes:
    import soundfile

    t = np.arange(int(rate * seconds)) / rate
    tone = 0.3 * np.sin(2 * np.pi * (220 + 110 * seed) * t)
    noise = 0.05 * np.random.default_rng(seed).standard_normal(len(t))
    samples = np.stack([tone + noise * (c + 1) for c in range(channels)], axis=1).astype("float32")
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt)
    return buffer.getvalue()


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def bomb_png(side: int = 8000) -> bytes:
    """A tiny file that decodes to side x side pixels: a decompression bomb for a small pixel limit."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (side, side)).save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


IMAGES = {  # name -> (bytes, mime)
    "png": (image_bytes(), "image/png"),
    "jpeg": (image_bytes(64, 48, fmt="JPEG", seed=1), "image/jpeg"),
    "rgba": (image_bytes(40, 40, mode="RGBA", seed=2), "image/png"),
    "grayscale": (image_bytes(33, 21, mode="L", seed=3), "image/png"),
    "tiny": (image_bytes(5, 7, seed=4), "image/png"),
    "large": (image_bytes(1600, 1200, fmt="JPEG", seed=5), "image/jpeg"),
}
AUDIO = {  # name -> (bytes, mime)
    "wav-16k-mono": (audio_bytes(16000, 1.0), "audio/wav"),
    "wav-44k-stereo": (audio_bytes(44100, 0.8, channels=2, seed=1), "audio/wav"),
    "flac-44k-mono": (audio_bytes(44100, 1.2, fmt="FLAC", seed=2), "audio/flac"),
    "ogg-16k-stereo": (audio_bytes(16000, 1.5, channels=2, fmt="OGG", seed=3), "audio/ogg"),
    "long-wav-16k": (audio_bytes(16000, 3.0, seed=4), "audio/wav"),  # longer than the tiny CLAP's 2 s window
}
