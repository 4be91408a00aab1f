"""What runs the model, on its model service: the classes per kind (`KindSpec.loader`), backends (torch, ONNX
Runtime, CTranslate2), devices and their memory. torch lives here; the gateway never imports this package
(tests/architecture/test_layers.py)."""
