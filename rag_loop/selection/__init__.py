"""Stage 2, failure selection: bad signals on every trace, novel intents, sampling streams with
inclusion probabilities under a judging budget, and estimates that do not lie; the
`*_expressions` modules are the traffic-sized parts as Ibis expressions for either engine."""
