"""The faust / mode / aiokafka internals the worker relies on exist, with the signatures
relied on, in the installed versions (streams/faust_seam.py ``contract``; no broker)."""
from dpstream.streams.faust_seam import contract


def test_every_framework_internal_the_worker_relies_on_is_there():
    assert contract() == []


def test_the_contract_notices_a_missing_internal(monkeypatch):
    from faust.transport.consumer import Consumer
    monkeypatch.delattr(Consumer, "_wait_next_records")
    assert any("_wait_next_records" in p for p in contract())
