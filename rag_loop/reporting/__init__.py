"""What people read: charts, self-contained HTML reports, the four-layer dashboard, and the
database summary printed after a run."""
