"""Every client-config block of docs/managed-kafka.md, run against the local secured
three-node cluster: the block's settings, with the cluster's address, the user's
credentials and certificate, and the local CA put in for the placeholders, must be read by
dpstream as the shape it says (``# shape: scram|plain|mtls``), log in as its user, and
write where that user may and nowhere else.

A service with a public CA needs no ``ssl.ca.location`` (the blocks leave it out); the
local cluster's CA is private, so the test adds it to such a block: the one setting it
adds. Every other setting is the block's own, so a property name dpstream does not read,
or a mechanism the cluster does not offer, fails here."""
import os

import pytest

from dpstream.streams.worker.kafka import Kafka, read_properties

from .cluster import secured_cluster  # noqa: F401  (pytest fixture)
from .test_kafka_cluster import dpstream, write
from tests.docs.blocks import ROOT, all_blocks

pytestmark = pytest.mark.kafka

PAGE = ROOT / "docs" / "managed-kafka.md"
BLOCKS = [b for b in all_blocks() if b.page == PAGE and b.lang == "properties"]


def _shape(block) -> str:
    first = block.text.splitlines()[0]
    assert first.startswith("# shape: "), f"{block.where}: a block must say its shape"
    return first.removeprefix("# shape: ").strip()


def _filled(block, local: dict[str, str]) -> str:
    """The block with each placeholder ``<...>`` replaced by the local config's value of the
    same setting, and the local CA added where the block trusts the system's store."""
    out = []
    for line in block.text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if value.startswith("<") and value.endswith(">"):
            value = local[key]
        out.append(f"{key}={value}")
    if "ssl.ca.location" not in block.text:
        out.append(f"ssl.ca.location={local['ssl.ca.location']}")
    return "\n".join(out) + "\n"


def test_the_guide_shows_every_shape_for_its_services():
    shapes = [_shape(b) for b in BLOCKS]
    assert len(BLOCKS) >= 6 and set(shapes) == {"scram", "plain", "mtls"}, shapes


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"line{b.line}-{_shape(b)}")
async def test_each_block_of_the_guide_logs_in_as_its_user(block, secured_cluster, tmp_path):  # noqa: F811
    shape = _shape(block)
    done = dpstream("acls", "--role", "producer", "--apply", "--client-config", secured_cluster.config("admin"))
    assert done.returncode == 0, done.stderr
    if "examples" not in await secured_cluster.topics():
        await secured_cluster.create_topic("examples")
    for user, allowed in (("producer", True), ("consumer", False)):
        local = read_properties(secured_cluster.config(user, shape))
        path = tmp_path / f"{user}.properties"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_filled(block, local))
        kafka = Kafka.from_settings(None, str(path), environ={})
        assert kafka.security_protocol == {"mtls": "SSL"}.get(shape, "SASL_SSL")
        assert (kafka.sasl_mechanism is None) == (shape == "mtls")
        outcome = await write(kafka, "examples")
        assert outcome == ("ok" if allowed else "TopicAuthorizationFailedError"), (block.where, user, outcome)
