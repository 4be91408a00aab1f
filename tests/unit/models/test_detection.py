"""How a checkpoint's kind is told when none is configured (`models.kinds.detect_kind`,
`models.text_checkpoint`): a text embedder only where the files say it is one, any checkpoint no kind
recognises refused with one line naming the folder, what was found and the way out (`kind:`). The kinds
recognised by their own files: tests/unit/models/test_scoring.py, test_families.py, test_media.py,
test_hybrid_models.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from config.errors import ConfigError
from config.settings import ModelConfig
from models.kinds import detect_kind, model_kind
from tests.conftest import ROOT


def refusal(folder: Path) -> str:
    with pytest.raises(ConfigError) as refused:
        detect_kind(folder)
    message = refused.value.message
    assert "\n" not in message and f"'{folder}'" in message and "set `kind:` in its configuration" in message
    return message


def saved_config(folder: Path, config) -> Path:  # config: a transformers PreTrainedConfig
    config.save_pretrained(folder)
    return folder


def test_the_former_remote_code_families_are_text_embedders_without_remote_code(native_family_paths):
    for model_type, folder in native_family_paths.items():
        config = json.loads((folder / "config.json").read_text())
        assert config["model_type"] == model_type and "auto_map" not in config
        assert detect_kind(folder) == "embed", model_type


def test_a_vision_language_model_is_refused_not_served_as_text(tmp_path):
    from transformers import Qwen3VLConfig

    vlm = saved_config(tmp_path / "vlm", Qwen3VLConfig())
    assert "model_type 'qwen3_vl' has vision_config" in refusal(vlm)
    # a configured kind is taken as it is: the operator says what the checkpoint is
    assert model_kind(ModelConfig(model_id=str(vlm), kind="embed", backend="torch")) == "embed"


def test_a_model_type_with_a_media_processor_is_refused(tmp_path):
    """ViT has no sub-configuration to tell it by: transformers' processor tables do."""
    from transformers import ViTConfig

    assert "model_type 'vit' takes its inputs through a media processor" in refusal(
        saved_config(tmp_path / "vit", ViTConfig())
    )


def test_a_saved_media_processor_is_refused(tmp_path, tiny_bert_path):
    folder = shutil.copytree(tiny_bert_path, tmp_path / "bert")
    assert detect_kind(folder) == "embed"
    (folder / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "ViTImageProcessor"}))
    assert "it holds a media processor (preprocessor_config.json)" in refusal(folder)


def test_sentence_transformers_modalities_speak_first(tmp_path):
    """sentence-transformers 6 saves the modalities it inferred for its Transformer module: an image-only
    embedder built by it is refused by them, before its config.json is read."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import ViTConfig, ViTImageProcessorPil, ViTModel

    torch.manual_seed(0)
    plain = tmp_path / "plain"
    tiny = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    ViTModel(ViTConfig(image_size=32, patch_size=16, **tiny)).save_pretrained(plain)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(plain)
    embedder = SentenceTransformer(modules=[Transformer(str(plain)), Pooling(32, pooling_mode="cls")], device="cpu")
    embedder.save_pretrained(str(tmp_path / "st"))
    assert "its sentence-transformers Transformer module takes image" in refusal(tmp_path / "st")


def test_a_text_only_modality_declaration_makes_an_embedder(windowed_bert_path):
    declared = json.loads((windowed_bert_path / "sentence_bert_config.json").read_text())["modality_config"]
    assert set(declared) == {"text"} and detect_kind(windowed_bert_path) == "embed"


def test_remote_code_is_refused(tmp_path, tiny_bert_path):
    """As gte-base-en-v1.5 and jina-embeddings-v3 were published before transformers built them: a
    model_type transformers lacks, or a known one whose architecture is the checkpoint's own class; and a
    sentence-transformers module of the checkpoint's own code."""
    remote = {"AutoConfig": "repo--configuration.Config", "AutoModel": "repo--modeling.Model"}
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text(
        json.dumps({"model_type": "new", "architectures": ["NewModel"], "auto_map": remote})
    )
    assert "model_type 'new' is not one transformers" in refusal(unknown)
    assert "(its own code, auto_map, is what builds it)" in refusal(unknown)
    own_class = shutil.copytree(tiny_bert_path, tmp_path / "own-class")
    config = json.loads((own_class / "config.json").read_text())
    (own_class / "config.json").write_text(json.dumps({**config, "architectures": ["BertLoRA"], "auto_map": remote}))
    assert "its model class BertLoRA is not one transformers" in refusal(own_class)
    # a known architecture, but the AutoModel that auto_map names is the checkpoint's own (jina-embeddings-v3's)
    loader = {"AutoModel": "repo--modeling_lora.BertLoRA"}
    (own_class / "config.json").write_text(json.dumps({**config, "auto_map": loader}))
    assert "its model class BertLoRA is not one transformers" in refusal(own_class)

    own_module = shutil.copytree(tiny_bert_path, tmp_path / "own-module")
    (own_module / "modules.json").write_text(
        json.dumps([{"idx": 0, "name": "0", "path": "", "type": "custom_st.Transformer"}])
    )
    assert "its sentence-transformers module 'custom_st.Transformer' is the checkpoint's own code" in refusal(
        own_module
    )


def test_remote_code_transformers_has_natively_is_served_without_it(tmp_path, native_family_paths):
    """nomic-embed-text's config.json names the same class in its auto_map as transformers 5 has: transformers
    builds its own without trust_remote_code, and so the folder is an embedder."""
    folder = shutil.copytree(native_family_paths["nomic_bert"], tmp_path / "nomic")
    config = json.loads((folder / "config.json").read_text())
    remote = {"AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"}
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": remote}))
    assert detect_kind(folder) == "embed"


def test_a_folder_transformers_cannot_read_is_refused(tmp_path):
    (tmp_path / "no-type").mkdir()
    (tmp_path / "no-type" / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    assert "its config.json names no model_type" in refusal(tmp_path / "no-type")
    (tmp_path / "empty").mkdir()
    assert "it holds no config.json" in refusal(tmp_path / "empty")


def test_detection_leaves_transformers_unimported(tiny_bert_path):
    """The gateway decides kinds before it hides torch (`gateway/http/assembly.py`): had detection imported
    transformers, transformers would have counted on torch there, and its tokenizers failed to load."""
    check = (
        "import sys; from pathlib import Path; from models.kinds import detect_kind; "
        f"assert detect_kind(Path({str(tiny_bert_path)!r})) == 'embed'; "
        "assert 'transformers' not in sys.modules, 'transformers was imported'"
    )
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_transformers_tables_are_read_as_transformers_has_them():
    """They are read from its source (above); a new transformers laying them out otherwise fails here."""
    import transformers
    from transformers.models.auto import auto_mappings

    from models.text_checkpoint import _config_types, _media_processor_types, _transformers_names

    # transformers adds the types of some audio and vision parts as it imports them (mimi_encoder, parakeet_tdt)
    types = _config_types()
    assert {"nomic_bert", "gte", "jina_embeddings_v3", "eurobert", "bert"} <= types
    assert types <= set(auto_mappings.CONFIG_MAPPING_NAMES) and len(types) > 0.98 * len(
        auto_mappings.CONFIG_MAPPING_NAMES
    )
    assert {"qwen3_vl", "whisper", "vit"} <= _media_processor_types() and "bert" not in _media_processor_types()
    classes = _transformers_names()
    assert {"NomicBertModel", "Qwen3ForCausalLM", "ColPaliForRetrieval"} <= classes
    assert len(classes & set(dir(transformers))) > 0.99 * len(classes)  # the classes it exports (one stray name)
