"""Stage 4, curation: representatives per intent, suggestions, the queue and its files, and
the curators' labels validated row by row."""
