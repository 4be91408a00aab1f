"""ModelConfig is its groups (config/model_settings.py): every group's field and validator reaches it."""

from __future__ import annotations

import pytest

from config.model_settings import (
    ModelConfig,
    ModelExecution,
    ModelInputs,
    ModelOutputs,
    ModelResidency,
    ModelSource,
)

GROUPS = (ModelSource, ModelExecution, ModelInputs, ModelOutputs, ModelResidency)


def test_model_config_has_every_groups_fields_in_the_files_order():
    assert list(ModelConfig.model_fields) == [name for group in GROUPS for name in group.model_fields]


@pytest.mark.parametrize("kind", ["field_validators", "model_validators"])
def test_every_groups_validators_run_on_model_config(kind):
    """pydantic keys validators by name: two of one name in two groups would leave one of them unrun."""
    names = [name for group in GROUPS for name in getattr(group.__pydantic_decorators__, kind)]
    assert len(names) == len(set(names))
    assert set(names) <= set(getattr(ModelConfig.__pydantic_decorators__, kind))


def test_empty_text_settings_read_as_unset():
    config = ModelConfig(model_id="folder", revision="", chat_template="", true_token="", batch_size="auto")
    assert (config.revision, config.chat_template, config.true_token, config.batch_size) == (None, None, None, None)
