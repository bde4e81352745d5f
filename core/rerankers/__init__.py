"""Rerankers: a second opinion on the fused shortlist."""
