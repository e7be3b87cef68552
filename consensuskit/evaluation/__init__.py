"""Scoring and comparing fits: partition ``metrics``, ``heldout`` perplexity, model
``comparison`` and ``figures``."""
