"""Storage shared by every stage: the DDL of the fixed-schema tables, table helpers, reads of
the trace tables that several stages make, and the layout of golden releases on disk."""
