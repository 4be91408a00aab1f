"""How checkpoints are found, loaded and run. Plain Python: no BentoML here.

- `models/` itself: what every side shares, without torch: the kind registry (`kinds.py`), the row and result types
  (`base.py`), finding checkpoints (`resolve.py`), batching's cost model (`batching.py`), scores, quantization.
- `models/preprocessing/`: inputs into token ids and pixel values, without torch (the gateway's side).
- `models/inference/`: the models themselves, on torch, ONNX Runtime or CTranslate2 (the model services' side).
"""
