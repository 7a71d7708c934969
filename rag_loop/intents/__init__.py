"""Stage 3, intents: the candidates' query embeddings, their intent clusters per language, and
the placement of new traffic in known clusters."""
