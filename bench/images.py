"""CLIP image throughput: the pieces the benchmark matrix needs (checkpoints, requests, in-process ceiling).

Two random-weight CLIPs, since the Hub is out of reach: the test suite's tiny one, and one of
openai/clip-vit-base-patch32's shape (ViT-B/32 vision tower, 224 px; BERT tokenizer). The weights are
noise; the compute per image is a real base CLIP's. Images are 256 x 256 PNGs of noise, so decoding and
resizing cost what a photo of that size costs.
"""

from __future__ import annotations

import base64
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testkit.checkpoints import build_clip  # noqa: E402
from testkit.media import image_bytes  # noqa: E402

IMAGE_SIDE = 256
IMAGES = 64


def build_base_clip(folder: Path, minilm: Path) -> Path:
    """CLIP at ViT-B/32 size (CLIPConfig's defaults) with the packaged MiniLM's BERT tokenizer."""
    import torch
    from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    torch.manual_seed(11)
    config = CLIPConfig(text_config={"vocab_size": 30522, "bos_token_id": 101, "eos_token_id": 102, "pad_token_id": 0})
    CLIPModel(config).save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(minilm), model_max_length=77)
    CLIPProcessor(image_processor=CLIPImageProcessor(), tokenizer=tokenizer).save_pretrained(folder)
    return folder


BUILDERS: dict[str, Callable[[Path, Path], Path]] = {"tiny": build_clip, "base": build_base_clip}


def pictures() -> list[bytes]:
    return [image_bytes(IMAGE_SIDE, IMAGE_SIDE, seed=i) for i in range(IMAGES)]


def picture_index(text: str) -> int:
    """The load generator hands out texts; each stands for one of the images, the same one every time."""
    return zlib.crc32(text.encode()) % IMAGES


def image_body(model: str) -> Callable[[list[str]], dict]:
    uris = ["data:image/png;base64," + base64.b64encode(image).decode() for image in pictures()]
    return lambda texts: {"model": model, "input": [{"image": uris[picture_index(t)]} for t in texts]}


def ceiling_encoder(folder: Path, threads: int) -> Callable[[list[str]], object]:
    """What the server does per image, in-process: decode the PNG, CLIP's processor, the vision tower and
    projection, all images of every in-flight request in one pass."""
    import io

    import torch
    from PIL import Image
    from transformers import CLIPModel, CLIPProcessor

    torch.set_num_threads(threads)
    model = CLIPModel.from_pretrained(str(folder)).eval()
    processor = CLIPProcessor.from_pretrained(str(folder))
    images = pictures()

    def encode(texts: list[str]) -> object:
        decoded = [Image.open(io.BytesIO(images[picture_index(t)])).convert("RGB") for t in texts]
        pixels = processor(images=decoded, return_tensors="pt")["pixel_values"]
        with torch.inference_mode():
            # transformers 5: the projected embedding is the output's `pooler_output` (as the model service reads it)
            features = model.get_image_features(pixel_values=pixels).pooler_output
            return torch.nn.functional.normalize(features, dim=-1)

    return encode
