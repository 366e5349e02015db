"""Package namespaces whose names are imported when first used (PEP 562 module ``__getattr__``).

``chakra.replay`` and ``chakra.pipeline`` export many names from many modules; importing them all up front
costs every command the start-up of modules it never runs (a link of one pair would load the replay, the
job layer and protobuf)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def module_of(modules: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Exported name -> the module it is imported from, given each module's names."""
    return {name: module for module, names in modules.items() for name in names}


def lazy_exports(package: str, namespace: dict[str, Any],
                 module_of: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (whose globals are ``namespace``) exporting each
    name of ``module_of`` from its module: imported on first use, then kept in ``namespace`` so that later
    lookups are plain attribute reads."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(module_of))

    return __getattr__, __dir__
