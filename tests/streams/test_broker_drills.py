"""The broker drills (tests/streams/broker_drill.py) on the three-node cluster, back to back
on one topic prefix and one pair of workers, while examples (50/s) and queries (10/s)
flow: kill -9 of the leader of ``examples``, of ``model-events`` and of ``ledger``, the
leader of ``model-events`` hung (SIGSTOP), a rolling restart of the three nodes, a kill
-9 of the active KRaft controller, and one node down for a minute. After each, every
prediction, answer, ledger entry and release equals the embedded runtime's on the same
inputs, no valid input is dead-lettered, no worker exits by itself, replay with the key
reproduces every release, and while a node was down every model answered queries sent
after it went down (replication 3 and min.insync.replicas 2 take acks=all writes with
one node away).

The hung leader is the drill for a request that gets no answer: before the worker
bounded its producers' wait for one (streams/worker/faust_seam.py
``bound_request_waits``), a hung node held the worker's writes for as long as it hung
(no output for 246 s of a 245 s hang; up to the producers' 20-minute request timeout),
though the controller had moved its leaderships within seconds. The last drill keeps its
node down for twice the worker's own retry bounds (a failing batch, a stalled restore:
30 s each), not the 180 s that ``python -m tests.streams.broker_drill`` holds by default
(twice the consumer's 90-s request timeout): a killed node refuses connections at once,
so no request waits for that timeout (the hung drill is the one where it counts), and
the suite stays within minutes. The inputs flow at a third of the command's rate: the
faults are the point, and each drill's replay reads everything sent so far.

Each test is one drill and depends on the cluster the earlier ones left; they run in
the order of DRILLS."""
import uuid

import pytest

from dpstream.streams.worker.bulk import GIVE_UP_AFTER
from dpstream.streams.worker.state import STALL

from .broker_drill import DRILLS, BrokerDrills
from .cluster import kafka_cluster  # noqa: F401  (pytest fixture)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def said() -> list[str]:
    """What the drills said (shown when one fails)."""
    return []


@pytest.fixture(scope="module")
def drills(kafka_cluster, tmp_path_factory, said):  # noqa: F811 - the fixture imported above
    found = BrokerDrills(kafka_cluster, f"bd{uuid.uuid4().hex[:8]}-", tmp_path_factory.mktemp("broker-drills"),
                         down_seconds=2 * max(GIVE_UP_AFTER, STALL), rate=50.0, log=said.append)
    try:
        found.setup()
        yield found
    finally:
        found.workers.stop_all()


def test_the_worker_creates_its_state_topics_with_three_replicas_and_min_insync_two(drills):
    """models, model-events, ledger and both changelogs, as the worker created them on a
    cluster of three: replication 3 and min.insync.replicas 2 (the topic plan's state role)."""
    assert not drills.topic_problems, "\n".join(drills.topic_report + drills.topic_problems)


@pytest.mark.parametrize("name", DRILLS)
def test_a_broker_failure_loses_invents_and_dead_letters_nothing_and_the_worker_goes_on(drills, said, name):
    said.clear()
    result = drills.run(name)
    assert result.ok, "\n".join([*said, result.line()])
