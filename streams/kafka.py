"""How dpstream connects to Kafka: one settings object that every client is made from.

The worker (through faust), its outputs producer, its log re-reads and tail checks, and
every CLI command (produce, consume, models, export, replay) build their aiokafka
clients here, so the broker address and the connection's security reach all of them
the same way.
"""
from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass, field

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


@dataclass(frozen=True)
class Kafka:
    """Where the brokers are and how to talk to them."""
    bootstrap: str = DEFAULT_BOOTSTRAP
    options: dict = field(default_factory=dict)     # extra aiokafka client settings (security)

    def client_args(self) -> dict:
        """Keyword arguments every aiokafka client takes."""
        return {"bootstrap_servers": self.bootstrap, **self.options}

    def producer(self, **kwargs):
        from aiokafka import AIOKafkaProducer
        return AIOKafkaProducer(**self.client_args(), **kwargs)

    def consumer(self, *topics: str, **kwargs):
        from aiokafka import AIOKafkaConsumer
        return AIOKafkaConsumer(*topics, **self.client_args(), **kwargs)

    def admin(self, **kwargs):
        from aiokafka.admin import AIOKafkaAdminClient
        return AIOKafkaAdminClient(**self.client_args(), **kwargs)

    def faust_broker(self) -> str:
        """The broker URL faust takes (``kafka://host:port;host:port``)."""
        return "kafka://" + ";".join(self.bootstrap.split(","))


@asynccontextmanager
async def running(client):
    """An aiokafka client started, and stopped (closed, for the admin client) however the
    block ends, also when starting it failed: an unreachable broker must not leave
    "Unclosed AIOKafkaConsumer" warnings behind."""
    stop = getattr(client, "stop", None) or client.close
    try:
        await client.start()
        yield client
    finally:
        try:
            await stop()
        except Exception:            # noqa: BLE001 - already broken: nothing left to close
            pass
