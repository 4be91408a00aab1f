"""Embento with its text embedder's model swapped for a simulated GPU (bench/simulated_device.py); every
other part, gateway and model service, is the real one. Served as `bench.simulated_service:Gateway`."""

import models.inference.device
import runners.pool
from bench.simulated_device import SIMULATED_MEMORY_BYTES, SimulatedEncoder

runners.pool.load_model = SimulatedEncoder  # looked up when a model service starts (`pool_for`)
models.inference.device.free_memory = lambda device: SIMULATED_MEMORY_BYTES  # the device's, for its pass limits

from service import Gateway  # noqa: E402,F401
