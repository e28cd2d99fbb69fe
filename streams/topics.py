"""Topic names, shared by the faust app, the CLI, replay and the tests."""
MODELS, EXAMPLES, QUERIES = "models", "examples", "queries"
MODEL_EVENTS = "model-events"
PREDICTIONS, LEDGER, RELEASES, REJECTED = "predictions", "ledger", "releases", "rejected"
INPUTS = (MODELS, EXAMPLES, QUERIES)
OUTPUTS = (PREDICTIONS, LEDGER, RELEASES, REJECTED)
ALL = INPUTS + (MODEL_EVENTS,) + OUTPUTS
