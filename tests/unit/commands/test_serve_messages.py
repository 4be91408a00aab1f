"""What `embento serve` prints as it starts and once ready (commands/serve.py): what is in force, not only what was
configured. The same through a real server: tests/server/test_cli.py."""

from __future__ import annotations

from commands.serve import ready_banner, start_lines
from config.settings import EmbentoConfig, ModelConfig

URL = "http://localhost:3000"
CONFIG = EmbentoConfig(
    models=[
        ModelConfig(model_id="org/m", served_model_name="m", aliases=["m-alias"]),
        ModelConfig(model_id="org/lazy", served_model_name="lazy-m", load="lazy", aliases=["later"]),
        ModelConfig(model_id="org/t", served_model_name="t", backend="torch", device="cpu"),
    ]
)


def card(name: str, backend: str, reason: str, alias_of: str | None = None) -> dict:
    """An entry of /v1/models as gateway/wire/openai.py writes it (the fields the banner reads)."""
    return {
        "id": name,
        "alias_of": alias_of,
        "modalities": ["text"],
        "capabilities": ["embed"],
        "backend": backend,
        "backend_reason": reason,
    }


def test_the_start_lines_say_what_is_configured_and_that_auto_is_chosen_as_a_model_loads():
    assert start_lines(CONFIG) == [
        "embento: serving org/m as 'm' (aliases: m-alias); backend auto, device auto: "
        "chosen as it loads (the ready message and GET /v1/models say which, and why)",
        "embento: serving org/lazy as 'lazy-m', lazy: loaded by its first request (aliases: later); backend auto, "
        "device auto: chosen as it loads (the ready message and GET /v1/models say which, and why)",
        "embento: serving org/t as 't'; backend torch, device cpu",
    ]


def test_the_ready_banner_says_where_each_model_runs_and_why_and_lists_lazy_models_and_aliases_as_such():
    models = {
        "data": [
            card("m", "onnx", "onnx: its export matches torch (min cosine 0.9999999 on 12 inputs)"),
            card("t", "torch", "configured"),
            card("m-alias", "onnx", "onnx: its export matches torch (min cosine 0.9999999 on 12 inputs)", "m"),
        ],
        "failed": [],
        "available": [{"id": "lazy-m", "status": "unloaded"}],
    }
    devices = {"m": "cpu", "t": "cpu", "lazy-m": None}
    banner = ready_banner(URL, models, CONFIG, needs_key=False, devices=devices).splitlines()
    assert banner[:-1] == [
        f"embento: ready on {URL} (Swagger UI: {URL}/, OpenAPI: {URL}/docs.json)",
        "  m (text): POST /v1/embeddings, /v2/embed, /embed",
        "    runs on onnx, cpu (backend: auto, its export matches torch (min cosine 0.9999999 on 12 inputs); "
        "device: auto, no GPU)",
        "  t (text): POST /v1/embeddings, /v2/embed, /embed",
        "    runs on torch, cpu (backend: configured; device: configured)",
        "  lazy-m: lazy, not loaded: its first request loads it",
        "  m-alias: an alias of m",
        "  later: an alias of lazy-m",
    ]
    assert banner[-1].startswith(f"  try: curl -s {URL}/v1/embeddings") and '"model": "m"' in banner[-1]
