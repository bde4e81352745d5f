"""Prefect flows that orchestrate `core`: sync and rebuild, their deployments, the file watcher, the shared
embedding limit."""
