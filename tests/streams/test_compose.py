"""docker-compose.yml is for users (no Docker engine here): check that it parses and
that it names what the README documents."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_defines_a_single_kraft_broker_and_a_worker_on_the_documented_ports():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    kafka, worker = compose["services"]["kafka"], compose["services"]["worker"]
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller" and env["KAFKA_NODE_ID"] == 1
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 1
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 1
    assert "INTERNAL://kafka:19092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert "9092:9092" in kafka["ports"] and "6066:6066" in worker["ports"]
    assert "kafka:19092" in worker["command"]
    assert worker["environment"]["DPSTREAM_SECRET_KEY_FILE"].startswith("/run/secrets/")
    readme = (ROOT / "README.md").read_text()
    assert "docker compose up" in readme and "localhost:9092" in readme and "6066" in readme
    assert (ROOT / "Dockerfile").exists()
