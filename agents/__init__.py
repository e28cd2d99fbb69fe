"""Runtime-agnostic stream processors.

Each agent is an async function over (an async iterable of input records, a mutable
mapping of state, an async ``emit(topic, key, value)``). A faust stream is an async
iterable and a faust table a mutable mapping, so the same agents run in the faust
worker (streams/worker/app.py) and in the embedded runtime (streams/tools/embedded.py).

Pipeline: ``sequencer`` validates raw records from the ``models``, ``examples`` and
``queries`` topics and appends them to the per-model ordered log ``model-events``;
``processor`` applies that log to each model's learner and emits predictions,
ledger entries and releases. The log fixes the order in which a model saw its
examples and queries, which is what makes replay and audits exact.
"""
