"""A trust floor for judge-driven verdicts (issue 45, seed 004 §15: check the judge against people
before it gates). A gate on a metric the curators grade says, beside its verdict, how well that
judge agrees with them (`judge_grade_agreement`: kappa, n, interval, on the judge version that
scored the run). Below the floor, or with too few grades, the judge is *not trusted*: its gate's
failures are reported and do not block, unless `untrusted="block"`.

A metric curators cannot grade (one the online judge does not score, e.g. a GEval criterion
that needs an expected output) has no measured agreement: it is said so, and its gate blocks
as configured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from rag_loop.evaluation.agreement import ALL_LANGUAGES
from rag_loop.store.tables import has_table

GRADED_METRICS = ("Faithfulness", "Answer Relevancy", "Contextual Relevancy")  # what the online judge scores


@dataclass(frozen=True)
class TrustSettings:
    """The floor: Cohen's kappa at least `min_kappa` on at least `min_grades` graded verdicts.
    `untrusted`: "warn" (an untrusted judge's gate failures do not block) or "block" (they do)."""

    min_kappa: float = 0.6
    min_grades: int = 30
    untrusted: str = "warn"
    graded_metrics: Sequence[str] = GRADED_METRICS

    def __post_init__(self) -> None:
        if self.untrusted not in ("warn", "block"):
            raise ValueError(f"untrusted {self.untrusted!r}: expected 'warn' or 'block'")


@dataclass(frozen=True)
class JudgeTrust:
    """How far one metric's judge is trusted: `status` trusted / not trusted / not graded."""

    metric: str
    judge_version: str
    status: str
    n: int = 0
    kappa: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    why: str = ""

    @property
    def trusted(self) -> bool:
        return self.status != "not trusted"

    def words(self) -> str:
        """`judge not trusted: kappa 0.00 [0.00, 0.00], n=32, under the 0.6 floor`, and the like."""
        if self.status == "not graded":
            return f"judge agreement not measured ({self.why})"
        head = "judge agrees with curators" if self.status == "trusted" else "judge not trusted"
        if self.kappa is None:  # the why says how many grades
            return f"{head}: {self.why}"
        interval = f" [{self.ci_low:.2f}, {self.ci_high:.2f}]" if self.ci_low is not None and self.ci_high is not None \
            else ""
        return f"{head}: kappa {self.kappa:.2f}{interval}, n={self.n}" + (f", {self.why}" if self.why else "")


def judge_trust(con: duckdb.DuckDBPyConnection, metrics: Iterable[str], judge_version: str,
                settings: TrustSettings = TrustSettings()) -> dict[str, JudgeTrust]:
    """Each metric's trust, from `judge_grade_agreement` (all languages, this judge version)."""
    rows: dict[str, tuple] = {}
    if has_table(con, "judge_grade_agreement"):
        rows = {r[0]: r[1:] for r in con.execute(
            "SELECT metric, n, kappa, ci_low, ci_high FROM judge_grade_agreement "
            "WHERE language = ? AND judge_version = ?", [ALL_LANGUAGES, judge_version]).fetchall()}
    return {metric: decide(metric, judge_version, *rows.get(metric, (0, None, None, None)), settings=settings)
            for metric in dict.fromkeys(metrics)}


def decide(metric: str, judge_version: str, n: int | None, kappa: float | None, ci_low: float | None = None,
           ci_high: float | None = None, settings: TrustSettings = TrustSettings()) -> JudgeTrust:
    """A metric's trust from its agreement figures (all languages, one judge version)."""
    if metric not in settings.graded_metrics:
        return JudgeTrust(metric, judge_version, "not graded", why="curators grade only the online judge's verdicts")
    n = int(n or 0)
    if n < settings.min_grades:
        why = f"{n} grades, fewer than the {settings.min_grades} the floor needs"
    elif kappa is None:
        why = f"kappa undefined on {n} grades (curators and judge gave one verdict only)"
    elif kappa < settings.min_kappa:
        why = f"under the {settings.min_kappa:g} floor"
    else:
        why = ""
    return JudgeTrust(metric, judge_version, "not trusted" if why else "trusted", n, kappa, ci_low, ci_high, why)


def trust_in_rows(rows: Iterable[Mapping[str, Any]], metric: str, judge_version: str,
                  settings: TrustSettings = TrustSettings()) -> JudgeTrust:
    """`decide` from exported agreement rows (the workspace's `judge-agreement.json`)."""
    found = next((r for r in rows if r.get("metric") == metric and r.get("judge_version") == judge_version
                  and r.get("language") == ALL_LANGUAGES), {})
    return decide(metric, judge_version, found.get("n") if isinstance(found.get("n"), int) else 0,
                  found.get("kappa"), found.get("ci_low"), found.get("ci_high"), settings)


def apply_trust(failures: Sequence[Mapping[str, Any]], trust: Mapping[str, JudgeTrust],
                settings: TrustSettings = TrustSettings()) -> list[dict[str, Any]]:
    """Gate failures with their judge's trust beside them (`judge`); a blocking failure of a
    graded metric's untrusted judge says so and, unless `untrusted="block"`, does not block
    (`untrusted_judge`: True)."""
    marked = []
    for failure in failures:
        found = trust.get(failure.get("metric", ""))
        if found is None:
            marked.append(dict(failure))
            continue
        failure = {**failure, "judge": found.words()}
        if found.status != "not graded":
            failure["problems"] = f"{failure['problems']} ({found.words()})"
        if not found.trusted and failure.get("blocking") and settings.untrusted == "warn":
            failure.update(blocking=False, untrusted_judge=True,
                           problems=f"{failure['problems']}: does not block")
        marked.append(failure)
    return marked
