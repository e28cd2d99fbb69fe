"""Ctrl-C on ``dpstream produce`` against a real broker: the command stops, says how far it
got, and exits 130 (docs/operations.md), wherever the interrupt lands."""
import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "card-fraud.examples.jsonl"     # 20,000 records

#: ``dpstream`` as its entry point runs it, with one change: the first Kafka client to close
#: says so on stderr and waits (at most 60 s) until the command's task has been asked to
#: stop before it closes. aiokafka's close awaits a helper task it cancelled under
#: ``suppress(CancelledError)``: a Ctrl-C that comes then is swallowed by the close. That
#: window is a few microseconds wide, so the test holds the command in it instead of
#: guessing when it opens.
PAUSED_AT_FIRST_CLOSE = """
import asyncio, sys, time
from aiokafka.client import AIOKafkaClient
from dpstream.streams.cli.commands import main

close, paused = AIOKafkaClient.close, []

async def close_once_interrupted(self):
    if not paused:
        paused.append(True)
        print("test: a Kafka client closes", file=sys.stderr, flush=True)
        deadline = time.monotonic() + 60
        while not asyncio.current_task().cancelling() and time.monotonic() < deadline:
            time.sleep(0.01)
    await close(self)

AIOKafkaClient.close = close_once_interrupted
sys.exit(main(sys.argv[1:]))
"""


def interrupted_at_first_close(args: list[str]) -> tuple[int, str, float]:
    """Run ``dpstream produce ARGS`` held at its first Kafka client close, Ctrl-C it there
    as a terminal does (SIGINT to its process group), and return its exit code, its stderr
    and the seconds from the Ctrl-C to its exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_AT_FIRST_CLOSE, "produce", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("test: a Kafka client closes"):
                break
        assert seen and seen[-1].startswith("test: a Kafka client closes"), "".join(seen)
        os.killpg(proc.pid, signal.SIGINT)
        interrupted = time.monotonic()
        rest = proc.stderr.read()
        proc.wait(60)
        return proc.returncode, "".join(seen) + rest, time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def registered(kafka_bootstrap):
    """A fresh topic prefix with its topics and the card-fraud model registered (no worker:
    the topics hold exactly what the test sends), and the broker flags for it."""
    from dpstream.streams.worker.kafka import Kafka
    from dpstream.streams.worker.topic_admin import ensure_topics
    prefix = f"ctrlc-{uuid.uuid4().hex[:8]}-"
    asyncio.run(ensure_topics(Kafka(kafka_bootstrap), prefix=prefix, partitions=1))
    broker = ["--bootstrap-server", kafka_bootstrap, "--prefix", prefix]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    done = subprocess.run([sys.executable, "-m", "dpstream.streams.cli", "models", "register",
                           str(ROOT / "examples" / "card-fraud.model.json"), *broker],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return prefix, broker


def sent(kafka_bootstrap, topic: str) -> int:
    from dpstream.streams.tools.topicread import read_to_end
    from dpstream.streams.worker.kafka import Kafka
    return len(asyncio.run(read_to_end(Kafka(kafka_bootstrap), topic, timeout=5)))


def test_ctrl_c_while_the_registrations_are_read_stops_produce_before_it_sends(kafka_bootstrap, registered):
    """Before: asyncio.run's Ctrl-C cancels the command's task, and the registrations read
    before sending closes Kafka clients whose close swallowed that cancellation; produce
    then sent every record and exited 0, as if no Ctrl-C had come."""
    prefix, broker = registered
    code, err, took = interrupted_at_first_close(["--topic", "examples", "--file", str(EXAMPLES), *broker])
    assert code == 130 and "dpstream produce: interrupted before sending: nothing sent" in err, err
    assert took < 20, f"{took:.1f} s from Ctrl-C to exit"
    assert sent(kafka_bootstrap, prefix + "examples") == 0


def test_ctrl_c_while_the_producer_closes_says_what_was_acknowledged(kafka_bootstrap, registered):
    """With --no-check the producer is the only client, and it closes after the last record
    was acknowledged. Before: the Ctrl-C was swallowed there and produce exited 0."""
    prefix, broker = registered
    n = sum(1 for _ in EXAMPLES.open())
    code, err, took = interrupted_at_first_close(["--topic", "examples", "--file", str(EXAMPLES),
                                                  "--no-check", *broker])
    assert code == 130 and (f"dpstream produce: interrupted: {n:,} of {n:,} records sent and "
                            f"acknowledged; resume with the same command and --skip {n}") in err, err
    assert took < 20, f"{took:.1f} s from Ctrl-C to exit"
    assert sent(kafka_bootstrap, prefix + "examples") == n
