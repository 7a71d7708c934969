"""Vectors shared by novelty, intents and drift: embedders per language, their cache, and
clustering (PCA + HDBSCAN)."""
