"""An index belongs to one agent and one workspace (SPEC section 1).

The file name carries both (`Config.db_path`), and the index records its workspace in its meta (`workspace`,
written by every sync): opening an index recorded for another folder is an error naming both folders, so an
index never answers for, or deletes the rows of, another workspace.

Indexes written before were named `<agent>.sqlite` whatever the folder: `core.legacy` moves such a file to
the name of the workspace it belongs to.
"""

from __future__ import annotations

from .config_types import Config
from .store import Store, StoreError

META_KEY = "workspace"


def check_workspace(store: Store, config: Config) -> None:
    """StoreError when the index records another workspace than the configured one."""
    recorded = store.get_meta(META_KEY)
    if recorded is not None and recorded != str(config.workspace):
        raise StoreError(
            f"the index {store.path} belongs to the workspace {recorded}, not to {config.workspace}; "
            "memsift will not answer from or change it (move it away to index this folder afresh)"
        )


def record_workspace(store: Store, config: Config) -> None:
    """Write the workspace into the meta (inside the caller's transaction)."""
    store.set_meta(META_KEY, str(config.workspace))
