"""`embento models import`: a checkpoint into BentoML's model store, for `model_id: bentoml://<name>`."""

from __future__ import annotations

import argparse
import sys

from config.errors import EmbentoError
from config.model_settings import STORE_PREFIX


def import_model(args: argparse.Namespace) -> int:
    from bento.packaging.store import import_checkpoint  # BentoML and transformers: only for this command

    try:
        model = import_checkpoint(args.source, args.name, args.revision)
    except EmbentoError as exc:
        print(f"embento: {exc.message}", file=sys.stderr)
        return 2
    print(f"embento: imported {args.source} as {model.tag}; serve it with `model_id: {STORE_PREFIX}{model.tag.name}`")
    return 0
