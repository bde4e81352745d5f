"""memsift's library: configuration, scanning, chunking, the index store, embedders, sync, search and get.

No Prefect and no HTTP server here; `flows/` and `api/` build on this package.
"""

from .config import Config, ConfigError, load_config
from .embedders import EmbedderUnavailable
from .get import GetError
from .indexer import SyncReport
from .memory import MemoryIndex
from .search import SearchError, SearchResponse
from .store import StoreError

__all__ = [
    "Config",
    "ConfigError",
    "EmbedderUnavailable",
    "GetError",
    "MemoryIndex",
    "SearchError",
    "SearchResponse",
    "StoreError",
    "SyncReport",
    "load_config",
]
