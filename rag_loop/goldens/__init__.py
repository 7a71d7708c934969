"""Stage 5, golden releases: goldens from accepted labels, redacted, published as immutable,
hashed versions with a manifest, a diff and lineage."""
