"""Embento with its text embedder's model swapped for a simulated GPU (bench/simulated_device.py); every
other part, gateway and model service, is the real one. Served as `bench.simulated_service:Gateway`."""

import models.device
import services.text
from bench.simulated_device import SIMULATED_MEMORY_BYTES, SimulatedEncoder

services.text._load_text_model = SimulatedEncoder  # looked up when the TextEmbedder service starts
models.device.free_memory = lambda device: SIMULATED_MEMORY_BYTES  # the device's, for its pass limits

from service import Gateway  # noqa: E402,F401
