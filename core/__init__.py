"""memsift's library: configuration, scanning, chunking, the index store, embedders, sync, search and get.

No Prefect and no HTTP server here; `flows/` and `api/` build on this package.
"""

from .config import load_config
from .config_types import Config
from .errors import ConfigError, EmbedderUnavailable, GetError, MemsiftError, SearchError, StoreError
from .memory import MemoryIndex
from .search_response import SearchResponse
from .sync_plan import SyncReport

__all__ = [
    "Config",
    "ConfigError",
    "EmbedderUnavailable",
    "GetError",
    "MemoryIndex",
    "MemsiftError",
    "SearchError",
    "SearchResponse",
    "StoreError",
    "SyncReport",
    "load_config",
]
