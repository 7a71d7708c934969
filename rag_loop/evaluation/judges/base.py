"""What every judge is: it builds fresh DeepEval metrics for a case, says what it is (recorded
with every run, seed 000 §14), and counts what its calls cost."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb

if TYPE_CHECKING:
    from deepeval.metrics import BaseMetric

    from rag_loop.evaluation.judges.examples import FewShot


@dataclass
class JudgeUsage:
    """What a run's judge calls cost; cached answers count as hits and cost nothing."""

    calls: int = 0
    cache_hits: int = 0
    retries: int = 0  # attempts tried again (a refusal, a timeout, a dropped connection)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class Meter:
    """What the judge calls made inside one `metered()` block cost."""

    usd: float = 0.0


_METER: ContextVar[Meter | None] = ContextVar("judge_meter", default=None)


@contextmanager
def metered() -> Iterator[Meter]:
    """Count the cost of the judge calls made in this block (and the asyncio tasks it starts),
    so that concurrent cases each get their own cost."""
    meter = Meter()
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


def charge(usd: float) -> None:
    """A judge call's cost, added to the enclosing `metered()` block if any."""
    meter = _METER.get()
    if meter is not None:
        meter.usd += usd


class Judge(ABC):
    """An instrument that scores cases; `metrics` is called once per case (metrics hold
    per-case state)."""

    usage: JudgeUsage

    @abstractmethod
    def metrics(self, thresholds: Mapping[str, float | None],
                geval: Sequence[Mapping[str, Any]] | None = None) -> list[BaseMetric]:
        """One fresh metric per configured name; a None threshold keeps it for monitoring.
        `geval`: the GEval criteria to build (None: the judge's own)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What identifies the instrument: kind, model, criteria (its `model` keys calibrations)."""

    @property
    def calls_in_flight(self) -> int | None:
        """The bound on the judge's calls at once, if it makes remote calls: a run keeps that
        many cases open, so that the bound, not the cases' rounds of calls, sets the pace."""
        return None

    def prepare(self, cases: Sequence[Any]) -> None:  # noqa: B027
        """Cases about to be scored (DeepEval test cases): a judge may batch work for them."""

    def with_few_shot(self, few_shot: FewShot | None) -> Judge:
        """This judge with curators' graded examples in its prompts (None: as it is). A judge
        without prompts cannot take them: it learns thresholds from grades (`alignment`)."""
        if few_shot is None or not few_shot.examples:
            return self
        raise ValueError(f"{type(self).__name__} has no prompt to show curators' examples in: few-shot "
                         "needs an LLM judge (this judge is aligned by its thresholds instead)")

    async def end_calls(self) -> None:  # noqa: B027
        """The run's event loop is ending: close what its calls opened (pooled connections
        belong to one loop; left to the garbage collector they are closed from another)."""

    def open(self, con: duckdb.DuckDBPyConnection) -> None:
        """Start a run: its usage counts from zero; load what the judge keeps between runs."""
        self.usage = JudgeUsage()

    def close(self, con: duckdb.DuckDBPyConnection) -> None:  # noqa: B027
        """Store what the judge keeps between runs."""


def cases_at_once(concurrency: int, judge: Judge) -> int:
    """Cases scored at once, online and in the regression eval alike: `concurrency`, or the
    remote judge's bound on calls in flight when that is more. A case's metrics run at once,
    but each is a chain of dependent calls (Faithfulness: truths and claims, then verdicts,
    then the reason), so a case holds about a third of its calls in flight at a time: with
    only `concurrency` cases open, a 16-case run of a 64-call judge left most of the call
    bound idle. The judge's own bound keeps the calls within it however many cases are open."""
    return max(1, concurrency, judge.calls_in_flight or 0)
