"""OTLP JSON: spans read one by one, staged, and assembled into native trace records."""
