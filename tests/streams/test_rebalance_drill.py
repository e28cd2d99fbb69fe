"""One run of the rebalance drill (tests/streams/drill.py) on the plaintext broker, with two
busy loops beside the workers: two workers in one group, kills and clean stops while
examples flow, a kill during a rejoin's rebalance. Every prediction and ledger charge
equals the embedded runtime's (none missing, none extra, none conflicting), no valid
record is dead-lettered, no worker exits by itself, and replay with the key reproduces
every release. Before the worker restored its own state, the same drill dead-lettered
valid records and crashed a worker in faust's table recovery."""
import pytest

from .drill import Drill

pytestmark = pytest.mark.kafka


def test_a_busy_rebalance_drill_loses_invents_and_dead_letters_nothing(kafka_bootstrap, topic_prefix, tmp_path):
    lines = []
    result = Drill(kafka_bootstrap, topic_prefix + "-", tmp_path, n=900, busy=2, log=lines.append).run()
    assert result.ok, "\n".join([*lines, result.line()])
