"""Prefect flows that orchestrate `core`: the sync flow today."""
