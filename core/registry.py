"""How a family (embedders, rerankers, sources) names its kinds: `"module:attribute"`, imported when chosen.

Naming a kind by a string, as plugin entry points do, keeps a family's `__init__` free of imports of its
kinds: `config.py` reads the family's names from it for its choice lists while every kind may import the
configuration without a cycle, and a kind nobody chose (onnxruntime, an HTTP client) costs nothing at start.
"""

from __future__ import annotations

import importlib
from typing import Any


def load(target: str) -> Any:
    """The attribute a `"module:attribute"` target names, its module imported on first use."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)
