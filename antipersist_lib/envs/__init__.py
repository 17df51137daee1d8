"""Benchmark adapters behind the one ``Environment`` interface, by name.

Adapters are imported lazily so that a user without, say, AppWorld installed can still run
ScienceWorld; asking for an adapter whose engine is missing raises an error that says what to
install.
"""

from __future__ import annotations

import inspect
from importlib import import_module
from typing import Any

from antipersist_lib.envs.base import Environment

#: benchmark name -> (module, adapter class)
ADAPTERS: dict[str, tuple[str, str]] = {
    "scienceworld": ("antipersist_lib.envs.scienceworld", "ScienceWorldEnvironment"),
    "alfworld": ("antipersist_lib.envs.alfworld", "ALFWorldEnvironment"),
    "webshop": ("antipersist_lib.envs.webshop.client", "WebShopEnvironment"),
    "appworld": ("antipersist_lib.envs.appworld", "AppWorldEnvironment"),
    # a small-model proxy on its real engine (not one of the papers' benchmarks)
    "textworld_express": ("antipersist_lib.envs.textworld_express", "TextWorldExpressEnvironment"),
    # the kit's own four-room test world (tests and the pipeline demo; not a benchmark)
    "errandworld": ("antipersist_lib.envs.errand_world", "ErrandWorld"),
}
BENCHMARKS: tuple[str, ...] = tuple(ADAPTERS)


def adapter_class(benchmark: str) -> type[Environment]:
    if benchmark not in ADAPTERS:
        raise ValueError(f"unknown benchmark {benchmark!r}; expected one of {BENCHMARKS}")
    module, cls = ADAPTERS[benchmark]
    return getattr(import_module(module), cls)


def make_env(benchmark: str, **options: Any) -> Environment:
    """Construct the adapter for ``benchmark`` (options are adapter-specific)."""
    cls = adapter_class(benchmark)
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as exc:  # checked before construction, so adapter bugs are not masked
        raise ValueError(f"benchmark_options for {benchmark!r}: {exc}") from exc
    return cls(**options)
