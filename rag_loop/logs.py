"""How a stage reports progress: one line at a time, to Dagster's log, the terminal, or nowhere."""

from collections.abc import Callable

Log = Callable[[str], None]


def quiet(_: str) -> None:
    """The default Log: say nothing."""
