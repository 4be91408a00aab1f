"""What this gateway worker serves now: the registry every part of the gateway reads, which one class writes."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from models.base import Kind, ModelInfo
from models.quantization import Quantizer


class ModelRegistry:
    """The models the server may serve, as this gateway worker knows them: their kinds (configuration order; the
    first capable one is the default), and once the start's warm-up is `done`, those served (`infos`, in the same
    order), those that failed (name -> why) and the int8/uint8 quantizers.

    Read everywhere through read-only views. Written only by the subsystem's reconciler (gateway/served/reconciler.py),
    through the methods below: a model becomes served, fails or goes by one path, whichever event caused it."""

    def __init__(
        self,
        kinds: Mapping[str, Kind],
        infos: Mapping[str, ModelInfo] | None = None,
        done: bool = False,
    ) -> None:
        """`infos` and `done`: a registry already warm (tests, and the engine without a server). Which models the
        start loads is the wanted set's to say (`ServedModels.start`), not the registry's."""
        self.configured = frozenset(kinds)
        self._kinds = dict(kinds)
        self._infos = dict(infos or {})
        self._failed: dict[str, str] = {}
        self._quantizers: dict[str, Quantizer] = {}
        self._done = done

    @property
    def kinds(self) -> Mapping[str, Kind]:
        return MappingProxyType(self._kinds)

    @property
    def infos(self) -> Mapping[str, ModelInfo]:
        return MappingProxyType(self._infos)

    @property
    def failed(self) -> Mapping[str, str]:
        return MappingProxyType(self._failed)

    @property
    def quantizers(self) -> Mapping[str, Quantizer]:
        return MappingProxyType(self._quantizers)

    @property
    def done(self) -> bool:
        """Whether the start's warm-up has ended: until then requests get a 503 (`model_not_ready`)."""
        return self._done

    # The writes: the reconciler's alone.

    def opened(self, served: Mapping[str, tuple[ModelInfo, Quantizer | None]], failed: Mapping[str, str]) -> None:
        """The start's warm-up done: what it warmed up is served from now on, all at once."""
        for name, (info, quantizer) in served.items():
            self.served(name, info, quantizer)
        self._failed.update(failed)
        self._done = True

    def served(self, name: str, info: ModelInfo, quantizer: Quantizer | None) -> None:
        """A model warm here: served, in configuration order (the first capable one answers requests naming none)."""
        self._failed.pop(name, None)
        if quantizer is not None:
            self._quantizers[name] = quantizer
        else:
            self._quantizers.pop(name, None)
        infos = {**self._infos, name: info}
        self._infos = {n: infos[n] for n in self._kinds if n in infos}

    def failed_to_serve(self, name: str, reason: str) -> None:
        """A model that failed to load, or to warm up here: not served, and requests naming it are told why."""
        self._dropped(name)
        self._failed[name] = reason

    def dropped(self, name: str) -> None:
        """A model its services no longer hold (unloaded, evicted): not served, and no failure to report."""
        self._dropped(name)
        self._failed.pop(name, None)

    def added(self, name: str, kind: Kind) -> None:
        """A model added at run time (after the configured ones), its preprocessor loaded here: not served yet."""
        self._kinds[name] = kind

    def removed(self, name: str) -> None:
        """A model added at run time, removed: no longer one the server may serve."""
        assert name not in self.configured, "only a model added at run time is removed"
        self._dropped(name)
        self._failed.pop(name, None)
        self._kinds.pop(name, None)

    def _dropped(self, name: str) -> None:
        self._infos.pop(name, None)
        self._quantizers.pop(name, None)
