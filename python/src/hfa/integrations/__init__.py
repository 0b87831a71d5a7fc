"""Integrations of hfa with other libraries (hfa.integrations.transformers)."""
