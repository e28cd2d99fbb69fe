"""Topic names, shared by the faust app, the CLI, replay and the tests."""
MODELS, EXAMPLES, QUERIES = "models", "examples", "queries"
MODEL_EVENTS = "model-events"
PREDICTIONS, LEDGER, RELEASES, REJECTED = "predictions", "ledger", "releases", "rejected"
INPUTS = (MODELS, EXAMPLES, QUERIES)
OUTPUTS = (PREDICTIONS, LEDGER, RELEASES, REJECTED)
ALL = INPUTS + (MODEL_EVENTS,) + OUTPUTS


def names(prefix: str = "") -> dict[str, str]:
    """Topic names with an optional prefix (several deployments or tests on one cluster)."""
    return {t: prefix + t for t in ALL}
