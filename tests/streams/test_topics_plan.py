"""The topic plan per role (streams/worker/topic_plan.py), ``dpstream topics plan | apply |
check`` (streams/cli/topics.py) and the worker's start check (streams/worker/topic_admin.py):
the plan's rules without a broker; on the plaintext broker, a plan for one broker, apply
then a clean check, a ledger kept seven days flagged by check and refused by the worker,
a replication factor above the broker count refused in one line; on the secured broker,
a worker without Create rights starting on topics an admin created, and a right it needs
reported by check and by the worker."""
import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dpstream.streams.tools.acls import Acl, needed, plan as acl_plan, uncovered
from dpstream.streams.worker.state import CHANGELOG_COMPACTION, TABLES, changelog_name
from dpstream.streams.worker.topic_plan import (AT_RISK, NOTE, REFUSED, Cluster, Found, PlanError, Tools, compare,
                                                plan)

from .cluster import kafka_cluster  # noqa: F401  (a pytest fixture)
from .kafka_helpers import KEY_HEX, Worker

DPSTREAM = str(Path(sys.executable).parent / "dpstream")
KEPT = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


def as_planned(the_plan, **changed) -> dict[str, Found]:
    """A deployment exactly as ``the_plan`` says, with ``changed[name]`` = (partitions,
    replication, {config: value}) replacing a topic's."""
    out = {}
    for t in the_plan.topics:
        partitions, replication, configs = changed.get(t.name, (t.partitions, t.replication, {}))
        out[t.name] = Found(t.name, partitions, replication, {**t.configs, **configs})
    return out


# ---------------------------------------------------------------- the plan, without a broker
def test_state_topics_get_three_replicas_and_two_in_sync_on_three_brokers_whatever_the_broker_default():
    p = plan(Cluster(brokers=3, default_replication=1, min_insync=1))
    state = {t.name for t in p.topics if t.role == "state"}
    assert state == {"models", "model-events", "ledger", *(changelog_name("dpstream", t) for t in TABLES)}
    for t in p.topics:
        if t.role == "state":
            assert (t.replication, t.configs["min.insync.replicas"]) == (3, "2"), t
        else:                          # the operator's default for inputs and outputs
            assert t.replication == 1 and "min.insync.replicas" not in t.configs, t


def test_a_broker_default_above_three_raises_the_state_topics_and_an_unknown_one_never_means_one():
    assert plan(Cluster(5, default_replication=4))["ledger"].replication == 4
    unknown = plan(Cluster(5))              # a principal that may not read the broker's configs
    assert {t.replication for t in unknown.topics} == {3}
    assert not unknown["examples"].replication_known and unknown["ledger"].replication_known
    assert plan(Cluster(2))["ledger"].configs["min.insync.replicas"] == "2"


def test_one_broker_plans_one_replica_and_the_flags_override():
    p = plan(Cluster(1, 1, 1))
    assert {t.replication for t in p.topics} == {1} and p["ledger"].configs["min.insync.replicas"] == "1"
    p = plan(Cluster(3, 3, 2), replication=2, min_insync=1, partitions=8)
    assert {t.replication for t in p.topics} == {2} and p["model-events"].configs["min.insync.replicas"] == "1"
    assert {t.partitions for t in p.topics if t.role != "internal"} == {8}


def test_ledger_model_events_and_models_are_kept_forever_the_changelogs_compacted_the_rest_the_operators():
    p = plan(Cluster(1), prefix="t-", app_id="t-app")
    for name in ("t-models", "t-model-events", "t-ledger"):
        assert {k: v for k, v in p[name].configs.items() if k != "min.insync.replicas"} == KEPT
    for table in TABLES:                  # the names and settings state.py gives its tables
        configs = p[changelog_name("t-app", table)].configs
        assert configs["cleanup.policy"] == "compact" and CHANGELOG_COMPACTION.items() <= configs.items()
    for name in ("t-examples", "t-queries", "t-predictions", "t-answers", "t-releases", "t-rejected"):
        assert p[name].configs == {}
    assert p["t-app-__assignor-__leader"].partitions == 1


def test_a_replication_factor_above_the_broker_count_is_refused_naming_both_numbers():
    with pytest.raises(PlanError, match=r"--replication-factor 3 is above the cluster's 1 broker\(s\): give at most 1"):
        plan(Cluster(1), replication=3)
    with pytest.raises(PlanError, match="default.replication.factor 3 is above the cluster's 2 broker"):
        plan(Cluster(2, default_replication=3))
    with pytest.raises(PlanError, match="--min-insync-replicas 3 is above the state topics' replication factor 2"):
        plan(Cluster(3), replication=2, min_insync=3)


def test_a_ledger_kept_seven_days_stops_the_worker_with_the_exact_fix():
    p = plan(Cluster(1))
    found = as_planned(p, ledger=(4, 1, {"retention.ms": "604800000"}))
    (diff,) = compare(p, found)
    assert diff.severity == REFUSED and diff.change == ("retention.ms", "-1")
    line = diff.line(Tools("b:9092", "admin.properties"))
    assert line == ("ledger: retention.ms 604800000, the plan says -1 (records older than 7 days are deleted, "
                    "charges with them); fix: kafka-configs.sh --bootstrap-server b:9092 --command-config "
                    "admin.properties --alter --entity-type topics --entity-name ledger --add-config retention.ms=-1")


@pytest.mark.parametrize("topic,configs,severity", [
    ("ledger", {"cleanup.policy": "compact"}, REFUSED),           # one charge per model id left
    ("model-events", {"cleanup.policy": "compact,delete"}, REFUSED),
    ("model-events", {"retention.bytes": "1073741824"}, REFUSED),
    ("models", {"retention.ms": "86400000"}, AT_RISK),            # replay loses first registrations
    ("dpstream-model-state-changelog", {"cleanup.policy": "delete"}, REFUSED),
    ("dpstream-model-state-changelog", {"segment.ms": "604800000"}, NOTE),
])
def test_each_setting_that_would_delete_state_is_judged_by_what_it_loses(topic, configs, severity):
    p = plan(Cluster(1))
    diffs = compare(p, as_planned(p, **{topic: (4, 1, configs)}))
    assert [(d.topic, d.severity) for d in diffs] == [(topic, severity)] * len(configs)


def test_partition_counts_matter_where_a_model_has_a_home_partition_and_nowhere_else():
    p = plan(Cluster(1))
    diffs = compare(p, as_planned(p, examples=(8, 1, {}), predictions=(8, 1, {})))
    by_topic = {d.topic: d for d in diffs}
    assert by_topic["examples"].severity == REFUSED and "recreate it with 4 partitions" in by_topic["examples"].fix
    assert by_topic["predictions"].severity == NOTE
    every = {t.name: (8, 1, {}) for t in p.topics if t.copartitioned}
    (first, *_) = compare(p, as_planned(p, **every))
    assert "give --partitions 8 to the worker" in first.fix


def test_replication_below_the_plan_puts_state_at_risk_and_min_insync_above_replication_stops_writes():
    p = plan(Cluster(3, 3, 2))
    diffs = compare(p, as_planned(p, ledger=(4, 1, {"min.insync.replicas": "1"}), examples=(4, 2, {})))
    assert {(d.topic, d.setting, d.severity) for d in diffs} == {
        ("ledger", "replication", AT_RISK), ("ledger", "min.insync.replicas", AT_RISK),
        ("examples", "replication", NOTE)}
    diffs = compare(p, as_planned(p, ledger=(4, 3, {"min.insync.replicas": "5"})))
    assert [(d.setting, d.severity, d.change) for d in diffs] == [
        ("min.insync.replicas", REFUSED, ("min.insync.replicas", "2"))]
    guessed = plan(Cluster(3))             # the broker's default unknown: inputs are not judged
    assert compare(guessed, as_planned(guessed, examples=(4, 1, {}))) == []


def test_a_missing_topic_names_the_apply_command_with_the_same_flags():
    p = plan(Cluster(1), prefix="t-")
    found = as_planned(p)
    del found["t-ledger"]
    (diff,) = compare(p, found)
    tools = Tools("b:9092", None, " --bootstrap-server b:9092 --prefix t-")
    assert diff.severity == REFUSED
    assert diff.line(tools).endswith("fix: dpstream topics apply --bootstrap-server b:9092 --prefix t-")


def test_the_kafka_topics_command_is_the_plans_topic_exactly():
    p = plan(Cluster(3, 3, 2), prefix="t-")
    line = Tools("b:9092", "/etc/admin config.properties").create(p["t-ledger"])
    assert line == ("kafka-topics.sh --bootstrap-server b:9092 --command-config '/etc/admin config.properties' "
                    "--create --if-not-exists --topic t-ledger --partitions 4 --replication-factor 3 "
                    "--config cleanup.policy=delete --config retention.ms=-1 --config retention.bytes=-1 "
                    "--config min.insync.replicas=2")


def test_the_worker_needs_describe_configs_on_the_state_topics_and_may_do_without_create():
    worker = [a for a in acl_plan("p-", "p-app") if a.principal == "User:p-worker"]
    configs = {a.resource for a in worker if a.operation == "DescribeConfigs"}
    assert configs == {"p-models", "p-model-events", "p-ledger", "p-app-sequencer-state-changelog",
                       "p-app-model-state-changelog", "p-app-__assignor-__leader"}
    assert all(a.pattern == 3 for a in worker)                       # LITERAL only
    assert not any(a.operation == "Create" for a in needed(worker))


def test_an_acl_is_covered_by_its_name_a_prefix_the_wildcard_or_an_implying_right_unless_denied():
    read = Acl("User:w", "Read", 2, "p-examples")
    describe = Acl("User:w", "Describe", 2, "p-examples")
    assert uncovered([read, describe], [(2, "p-examples", 3, "User:w", 3)], []) == []       # Read implies Describe
    assert uncovered([read], [(2, "p-", 4, "User:w", 2)], []) == []                         # prefix, All
    assert uncovered([read], [(2, "*", 3, "User:*", 3)], []) == []                          # the wildcards
    assert uncovered([read], [(2, "p-examples", 3, "User:w", 3)], [(2, "p-", 4, "User:w", 3)]) == [read]
    assert uncovered([read], [(2, "p-examples", 3, "User:other", 3), (2, "p-ex", 3, "User:w", 3)], []) == [read]


# ---------------------------------------------------------------- on the plaintext broker
def dpstream(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    """The installed command, as a new user runs it."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    return subprocess.run([DPSTREAM, *args], capture_output=True, text=True, timeout=timeout,
                          env={**environ, **(env or {})})


def one_line(done, code: int) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return lines[0]


def worker_once(bootstrap: str, prefix: str, tmp_path, *args: str, env=None) -> subprocess.CompletedProcess:
    """``dpstream worker`` expected to stop at its start check."""
    return dpstream("worker", "--bootstrap-server", bootstrap, "--prefix", prefix, "--data-dir",
                    str(tmp_path / "w"), *args, env={"DPSTREAM_SECRET_KEY": KEY_HEX, **(env or {})})


async def set_config(kafka, prefix: str, topic: str, key: str, value: str) -> None:
    """As an operator's kafka-configs.sh --add-config would (the topic's other configs kept)."""
    from dpstream.streams.worker.kafka import running
    from dpstream.streams.worker.topic_admin import alter, read, read_cluster
    async with running(kafka.admin()) as admin:
        deployment = await read(admin, plan(await read_cluster(admin), prefix=prefix))
        assert await alter(admin, prefix + topic, deployment.own[prefix + topic], {key: value}) is None


@pytest.mark.kafka
def test_plan_on_one_broker_prints_every_topic_and_its_kafka_topics_command(kafka_bootstrap):
    done = dpstream("topics", "plan", "--bootstrap-server", kafka_bootstrap, "--prefix", "t-")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines if line.startswith("t-")}
    assert set(rows) == {f"t-{t}" for t in ("models", "examples", "queries", "model-events", "predictions", "answers",
                                            "ledger", "releases", "rejected", "dpstream-sequencer-state-changelog",
                                            "dpstream-model-state-changelog", "dpstream-__assignor-__leader")}
    assert rows["t-ledger"].split()[1:] == ["state", "partitions=4", "replication=1", "cleanup.policy=delete",
                                             "retention.ms=-1", "retention.bytes=-1", "min.insync.replicas=1"]
    assert rows["t-examples"].split()[1:] == ["input", "partitions=4", "replication=1"]
    creates = [line for line in lines if line.startswith("kafka-topics.sh ")]
    assert len(creates) == len(rows)
    assert f"kafka-topics.sh --bootstrap-server {kafka_bootstrap} --create --if-not-exists --topic t-ledger " \
           "--partitions 4 --replication-factor 1 --config cleanup.policy=delete --config retention.ms=-1 " \
           "--config retention.bytes=-1 --config min.insync.replicas=1" in creates


@pytest.mark.kafka
def test_apply_then_check_is_clean_and_apply_again_changes_nothing(kafka_bootstrap, topic_prefix):
    prefix = topic_prefix + "-"
    done = dpstream("topics", "apply", "--bootstrap-server", kafka_bootstrap, "--prefix", prefix)
    assert done.returncode == 0 and "12 created, 0 altered" in done.stderr, done.stderr
    check = dpstream("topics", "check", "--bootstrap-server", kafka_bootstrap, "--prefix", prefix)
    assert check.returncode == 0 and "as planned" in check.stderr, check.stdout + check.stderr
    assert "rights were not checked: the broker has no authorizer" in check.stdout   # and says so
    again = dpstream("topics", "apply", "--bootstrap-server", kafka_bootstrap, "--prefix", prefix)
    assert again.returncode == 0 and "0 created, 0 altered" in again.stderr, again.stderr


@pytest.mark.kafka
def test_check_flags_a_ledger_kept_seven_days_and_the_worker_refuses_to_start_on_it(
        kafka_bootstrap, topic_prefix, tmp_path):
    from dpstream.streams.worker.kafka import Kafka
    prefix = topic_prefix + "-"
    assert dpstream("topics", "apply", "--bootstrap-server", kafka_bootstrap, "--prefix", prefix).returncode == 0
    asyncio.run(set_config(Kafka(kafka_bootstrap), prefix, "ledger", "retention.ms", "604800000"))
    fix = (f"kafka-configs.sh --bootstrap-server {kafka_bootstrap} --alter --entity-type topics "
           f"--entity-name {prefix}ledger --add-config retention.ms=-1")
    check = dpstream("topics", "check", "--bootstrap-server", kafka_bootstrap, "--prefix", prefix)
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"stops the worker: {prefix}ledger: retention.ms 604800000, the plan says -1 (records older than " \
           f"7 days are deleted, charges with them); fix: {fix}" in check.stdout.splitlines()
    line = one_line(worker_once(kafka_bootstrap, prefix, tmp_path), 1)
    assert line == f"dpstream worker: refused to start: {prefix}ledger: retention.ms 604800000, the plan says " \
                   f"-1 (records older than 7 days are deleted, charges with them); fix: {fix}"
    fixed = dpstream("topics", "apply", "--bootstrap-server", kafka_bootstrap, "--prefix", prefix)
    assert f"altered {prefix}ledger: retention.ms 604800000 -> -1" in fixed.stdout, fixed.stdout + fixed.stderr
    assert dpstream("topics", "check", "--bootstrap-server", kafka_bootstrap, "--prefix", prefix).returncode == 0


@pytest.mark.kafka
def test_a_replication_factor_above_the_broker_count_is_refused_in_one_line(kafka_bootstrap, topic_prefix, tmp_path):
    for args in (("topics", "plan", "--bootstrap-server", kafka_bootstrap, "--replication-factor", "3"),
                 ("topics", "apply", "--bootstrap-server", kafka_bootstrap, "--replication-factor", "3",
                  "--prefix", topic_prefix)):
        line = one_line(dpstream(*args), 2)
        assert line == "dpstream topics: --replication-factor 3 is above the cluster's 1 broker(s): give at most 1"
    line = one_line(worker_once(kafka_bootstrap, topic_prefix, tmp_path, "--replication-factor", "3"), 2)
    assert line == "dpstream worker: --replication-factor 3 is above the cluster's 1 broker(s): give at most 1"
    assert dpstream("topics", "check", "--bootstrap-server", kafka_bootstrap, "--prefix", topic_prefix).returncode == 1


@pytest.mark.kafka
def test_a_worker_refuses_topics_whose_partitions_would_misplace_models(kafka_bootstrap, topic_prefix, tmp_path):
    prefix = topic_prefix + "-"
    assert dpstream("topics", "apply", "--bootstrap-server", kafka_bootstrap, "--prefix", prefix).returncode == 0
    line = one_line(worker_once(kafka_bootstrap, prefix, tmp_path, "--partitions", "8"), 1)
    assert f"refused to start: {prefix}" in line and "partitions 4, the plan says 8" in line
    assert "give --partitions 4 to the worker" in line


@pytest.mark.kafka
def test_on_three_brokers_apply_and_check_give_the_state_topics_three_replicas_and_two_in_sync(
        kafka_cluster, topic_prefix):
    prefix, bootstrap = topic_prefix + "-", kafka_cluster.bootstrap
    done = dpstream("topics", "plan", "--bootstrap-server", bootstrap, "--prefix", prefix)
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line.startswith(prefix)}
    for name in ("models", "model-events", "ledger", "dpstream-model-state-changelog"):
        assert "replication=3" in rows[prefix + name] and "min.insync.replicas=2" in rows[prefix + name], rows
    done = dpstream("topics", "apply", "--bootstrap-server", bootstrap, "--prefix", prefix)
    assert done.returncode == 0 and "12 created" in done.stderr, done.stdout + done.stderr
    check = dpstream("topics", "check", "--bootstrap-server", bootstrap, "--prefix", prefix)
    assert check.returncode == 0 and "as planned (12 topics, 3 broker(s))" in check.stderr, check.stdout + check.stderr
    for p in asyncio.run(kafka_cluster.partitions(prefix + "ledger")).values():
        assert sorted(p["replicas"]) == [1, 2, 3]
    line = one_line(dpstream("topics", "plan", "--bootstrap-server", bootstrap, "--replication-factor", "4"), 2)
    assert line == "dpstream topics: --replication-factor 4 is above the cluster's 3 broker(s): give at most 3"


@pytest.mark.kafka
def test_the_deployment_pages_topics_block_runs_verbatim(kafka_bootstrap):
    """docs/deployment.md, "Topics an operator owns": plan, apply and check as a user's shell
    runs them (the broker named by $DPSTREAM_KAFKA_BOOTSTRAP); run again, apply changes
    nothing and check stays clean."""
    from tests.docs.blocks import ROOT, block_under
    block = block_under("docs/deployment.md", "Topics an operator owns", "bash")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    env["DPSTREAM_KAFKA_BOOTSTRAP"] = kafka_bootstrap
    done = subprocess.run(["bash", "-c", "set -eo pipefail\n" + block.text], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "kafka-topics.sh --bootstrap-server" in done.stdout and "team-a-ledger" in done.stdout
    assert "dpstream topics: as planned" in done.stderr, done.stderr


# ---------------------------------------------------------------- on the secured broker
@pytest.mark.kafka
def test_a_worker_without_create_rights_starts_on_topics_an_admin_created(secured, tmp_path):
    """The worker's Create rights taken away: on missing topics it stops in one line naming
    them and ``dpstream topics apply``; once an admin applied the plan, ``check`` is clean
    and the worker starts. A right it needs (DescribeConfigs on the ledger) taken away too:
    check names it, and the worker refuses in one line."""
    from dpstream.streams.worker.faust_seam import delete_acls
    from dpstream.streams.worker.kafka import running
    from .secure_broker import dpstream as as_user
    prefix = f"n{uuid.uuid4().hex[:6]}-"
    tenant = secured.tenant(prefix, app_id=prefix + "app")
    worker = [a for a in acl_plan(prefix, prefix + "app") if a.principal == f"User:{prefix}worker"]
    ledger_configs = [a for a in worker if a.operation == "DescribeConfigs" and a.resource == prefix + "ledger"]

    def revoke(acls):
        async def go():
            async with running(secured.as_("admin").admin()) as admin:
                assert await delete_acls(admin, acls) == []
        asyncio.run(go())
    revoke([a for a in worker if a.operation == "Create"])
    common = ("--prefix", prefix, "--app-id", prefix + "app")
    start = as_user(secured, tenant.config("worker"), "worker", "--bootstrap-server", secured.bootstrap, *common,
                    "--data-dir", str(tmp_path / "refused"))
    line = one_line(start, 1)
    assert f"not authorized: principal User:{prefix}worker may not Describe and Create the topics" in line
    assert f"{prefix}ledger" in line and "dpstream topics apply" in line and "--command-config ADMIN.properties" in line

    apply = as_user(secured, "admin", "topics", "apply", *common)
    assert apply.returncode == 0 and "12 created" in apply.stderr, apply.stdout + apply.stderr
    check = as_user(secured, "admin", "topics", "check", *common)
    assert check.returncode == 0 and "the worker holds its rights" in check.stderr, check.stdout + check.stderr
    w = Worker(secured.bootstrap, prefix, tmp_path, args=("--command-config", tenant.config("worker")))
    try:
        w.start()
        assert b"created" not in w.log.read_bytes() and b"warning:" not in w.log.read_bytes()
    finally:
        w.stop()

    revoke(ledger_configs)
    check = as_user(secured, "admin", "topics", "check", *common)
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"missing right: ALLOW User:{prefix}worker" in check.stdout and f"DescribeConfigs  topic {prefix}ledger" \
        in check.stdout
    line = one_line(as_user(secured, tenant.config("worker"), "worker", *common,
                            "--data-dir", str(tmp_path / "w2")), 1)
    assert f"not authorized: principal User:{prefix}worker may not DescribeConfigs topic {prefix}ledger" in line
    as_user(secured, "admin", "acls", *common, "--remove")
