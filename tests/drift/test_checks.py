"""A check over a run's days: missing data is said, never a pass."""

from hypothesis import given
from hypothesis import strategies as st

from rag_loop.drift.checks import Limit, Verdict, assess, over_days

LIMIT = Limit(warn=0.1, error=0.2, min_sample=30)
figures = st.tuples(st.one_of(st.none(), st.floats(0, 1), st.just(float("nan"))), st.integers(0, 100))


@given(st.lists(figures, max_size=6))
def test_a_check_passes_only_when_some_day_was_evaluated_and_none_fired(days):
    verdicts = [assess("shift", value, n, LIMIT) for value, n in days]
    outcome = over_days(verdicts)
    judged = [(v, n) for v, n in days if v is not None and v == v and n >= LIMIT.min_sample]
    fired = [v for v, _ in judged if v > LIMIT.warn]
    assert outcome.passed == (bool(judged) and not fired)
    assert outcome.severity == ("ERROR" if any(v > LIMIT.error for v in fired) else "WARN")
    if not judged:
        assert outcome.note.startswith("not evaluated")


def test_no_baseline_on_any_day_fails_at_warn_and_says_why():
    outcome = over_days([assess("shift", None, 500, LIMIT), assess("shift", 0.05, 3, LIMIT)])
    assert not outcome.passed and outcome.severity == "WARN"
    assert "no baseline" in outcome.note and "below the minimum sample" in outcome.note
    assert over_days([Verdict("shift", 0.05, 500), assess("shift", None, 0, LIMIT)]).passed
