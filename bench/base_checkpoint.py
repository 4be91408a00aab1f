"""A base-size BERT sentence-transformers checkpoint for the peer benchmark, built once into a cache folder.

    python bench/base_checkpoint.py [--folder DIR]     # prints the folder

The Hub is out of reach, so the weights are random (seed fixed); the compute per token is a real base
model's: 12 layers, hidden 768, 12 heads, intermediate 3072 (bert-base-uncased, and so the shape of
msmarco-bert-base-dot-v5 or all-mpnet-base-v2 to within the attention's relative-position term).
The folder is laid out as a real checkpoint is: `save_pretrained` output (config.json, model.safetensors),
the packaged MiniLM's tokenizer files (the same BERT uncased vocabulary), modules.json (Transformer,
Pooling, Normalize), 1_Pooling/config.json (mean), sentence_bert_config.json and
config_sentence_transformers.json. Every server in bench/peers.py loads it as it would load a Hub download.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

NAME = "bert-base-random"
SEED = 0
MAX_SEQ_LENGTH = 256  # all-MiniLM-L6-v2's, so the two models see the same truncation
SHAPE = {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072}
DEFAULT_FOLDER = Path("~/.cache/embento-bench").expanduser() / f"{NAME}-seed{SEED}"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
# Written last: a folder without it is an interrupted build, and is built again.
MARK = "built.json"


def build(folder: Path = DEFAULT_FOLDER) -> Path:
    """The checkpoint's folder, built on the first call (a few seconds, about 440 MB)."""
    spec = {"name": NAME, "seed": SEED, "shape": SHAPE, "max_seq_length": MAX_SEQ_LENGTH}
    mark = folder / MARK
    if mark.exists() and json.loads(mark.read_text()) == spec:
        return folder
    import torch
    from transformers import BertConfig, BertModel

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from models.resolve import packaged_model_path

    minilm = packaged_model_path("sentence-transformers/all-MiniLM-L6-v2")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    torch.manual_seed(SEED)
    config = BertConfig(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, pad_token_id=0, **SHAPE)
    model = BertModel(config)  # with its pooler, as bert-base checkpoints ship
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm / name, folder / name)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": SHAPE["hidden_size"],
                "pooling_mode_cls_token": False,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            },
            indent=2,
        )
    )
    (folder / "2_Normalize").mkdir()
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False}, indent=2)
    )
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps(
            {
                "__version__": {"sentence_transformers": "3.0.0", "transformers": "4.41.0", "pytorch": "2.3.0"},
                "prompts": {},
                "default_prompt_name": None,
                "similarity_fn_name": "cosine",
            },
            indent=2,
        )
    )
    mark.write_text(json.dumps(spec))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    print(build(parser.parse_args().folder))


if __name__ == "__main__":
    main()
