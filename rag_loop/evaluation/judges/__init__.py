"""Judges of the regression eval: an OpenAI-compatible LLM behind DeepEval's own metrics, or
the offline evidence rules as DeepEval custom metrics."""
