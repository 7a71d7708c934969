from rag_loop.demo.generate import read_truth, simulate, stored_trace_id
from rag_loop.demo.intent_catalog import INTENTS
from tests.helpers import DEMO


def test_the_generator_reproduces_the_committed_ground_truth():
    """One simulation (seed 7) against the committed truth.parquet: the generator is
    deterministic across runs and machines, and the committed data is what it makes."""
    traces = simulate(7)
    truth = read_truth(DEMO)
    assert [stored_trace_id(t) for t in traces] == truth["trace_id"].to_pylist()
    assert [t["_intent"] for t in traces] == truth["intent"].to_pylist()
    assert len(traces) >= 5000 and len({t["timestamp"][:10] for t in traces}) == 14
    assert len(INTENTS) >= 40 and all(i.en and i.vi for i in INTENTS)
