"""Topic settings per role: what every dpstream topic and the worker's changelogs need
(``plan``), and how a deployment differs from it (``compare``). Pure: the broker's side
(reading a cluster, creating, altering) is streams/worker/topic_admin.py; ``dpstream topics
plan | apply | check`` (streams/cli/topics.py) and the worker's start check both ask this
module, so they never disagree.

| role | topics | replication | min.insync.replicas | cleanup and retention |
|---|---|---|---|---|
| state | ``models``, ``model-events``, ``ledger`` | R_state | M_state | ``delete``, ``retention.ms=-1``, ``retention.bytes=-1`` |
| state | the changelogs ``{app_id}-{table}-changelog`` | R_state | M_state | ``compact`` (and the short segments of ``CHANGELOG_COMPACTION``) |
| input | ``examples``, ``queries`` | R_io | the broker's | the broker's (the operator's retention) |
| output | ``predictions``, ``answers``, ``releases``, ``rejected`` | R_io | the broker's | the broker's |
| internal | faust's ``{app_id}-__assignor-__leader`` (1 partition) | R_io | the broker's | the broker's |

State is what a lost disk must not lose. ``ledger`` holds every charge and
``model-events`` the sequenced log a keyed replay recomputes: neither may be deleted by
time or size, and neither may be compacted (compaction keeps the last record per key, and
both are keyed by model id: a compacted ledger keeps one charge per model). ``models``
is kept the same way: replay and ``models list`` judge a registration by the first one of
its id (a later one with another config is refused, agents/sequencer.py), and compaction
would keep the refused one instead; the topic is small (an admin writes it). The
changelogs are compacted: they hold the tables' last value per key, and a restore must
find every key (deleting by time would forget a model's spent budget).

Numbers. ``B`` brokers; ``D`` the broker's ``default.replication.factor`` and ``m`` its
``min.insync.replicas``, when the caller may read them (DescribeConfigs on the cluster:
an admin may, the worker may not, and then they are unknown).

* ``R_state`` = ``--replication-factor``, else the larger of min(3, B) and D (when D <= B).
  Never a silent 1 on a cluster of several brokers, whatever the broker's default.
* ``M_state`` = ``--min-insync-replicas``, else the larger of min(2, R_state) and m (when
  m <= R_state). With ``acks=all`` a write the broker acknowledged is then on two disks
  (on a cluster of 3+); on a cluster of 2, a broker down stops the state writes until it
  is back (durability first: a charge lost with a disk would let a model spend its
  budget twice).
* ``R_io`` = ``--replication-factor``, else D, else (D unknown) min(3, B); a replication
  of the inputs and outputs is compared with a deployment only when it was given or read.
* A replication factor above B is refused (Kafka could not place the replicas), as is a
  ``min.insync.replicas`` above the replication factor (every ``acks=all`` write refused).

Partitions: every topic keyed by model id and every changelog has ``--partitions``
(default 4). The worker relies on it (co-partitioning, streams/worker/app.py): it places a
model at murmur2(model id) mod ``--partitions`` and dead-letters an input found elsewhere
(agents/sequencer.py ``MISPLACED``), and a model's inputs, log and table state share one
partition number (the changelog partition p holds the state of input and log partition
p). So an input topic, ``model-events`` or a changelog with another count breaks the
worker; the outputs' count only spreads their records (outputs are placed by the
topic's own count). Adding partitions later is no fix: it moves models to other
partitions, away from their state.

Replication and ``min.insync.replicas`` are minimums (more is never reported); partitions
and the state topics' cleanup and retention are exact.
"""
from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from .state import CHANGELOG_COMPACTION, TABLES, changelog_name
from .topics import ALL, DEFAULT_PARTITIONS, EXAMPLES, INPUTS, LEDGER, MODEL_EVENTS, MODELS, QUERIES, STATE_TOPICS

STATE, INPUT, OUTPUT, INTERNAL = "state", "input", "output", "internal"
STATE_REPLICATION, STATE_MIN_INSYNC = 3, 2
KEPT = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
COMPACTED = {"cleanup.policy": "compact", **CHANGELOG_COMPACTION}
CHARGES = (MODEL_EVENTS, LEDGER)          # state whose deletion stops the worker (charges, the log)
COPARTITIONED = (*INPUTS, MODEL_EVENTS)   # with the changelogs: their partition is a model's home
ROLE = {**dict.fromkeys(STATE_TOPICS, STATE), EXAMPLES: INPUT, QUERIES: INPUT}

# What a difference means (``Difference.severity``)
REFUSED = "stops the worker"   # the worker refuses to start: it would break, or lose charges
AT_RISK = "at risk"            # state a lost disk or a deletion could lose; the worker warns
NOTE = "note"                  # neither; the worker warns


class PlanError(ValueError):
    """A plan that cannot be made (the message names the parameter, its value and the fix)."""


@dataclass(frozen=True)
class Cluster:
    """What the plan needs to know of a cluster (``None``: the caller may not read it)."""
    brokers: int
    default_replication: int | None = None     # default.replication.factor
    min_insync: int | None = None              # min.insync.replicas


@dataclass(frozen=True)
class TopicSpec:
    """One topic of the plan. ``base``: its dpstream name (``ledger`` for ``p-ledger``; a
    changelog's table name; ``assignor``); ``configs``: the overrides set on the topic (an
    empty one takes the broker's own); ``copartitioned``: its partition number is a model's
    home (inputs, ``model-events``, changelogs); ``replication_known``: False when the
    replication is a guess (inputs and outputs, the broker's default unknown)."""
    name: str
    base: str
    role: str
    partitions: int
    replication: int
    configs: Mapping[str, str] = field(default_factory=dict)
    copartitioned: bool = False
    replication_known: bool = True

    def describe(self) -> str:
        settings = " ".join(f"{k}={v}" for k, v in self.configs.items())
        return (f"{self.name:40s} {self.role:8s} partitions={self.partitions} "
                f"replication={self.replication} {settings}").rstrip()


@dataclass(frozen=True)
class Plan:
    topics: tuple[TopicSpec, ...]
    cluster: Cluster
    rules: tuple[str, ...]             # how the numbers were chosen, for ``dpstream topics plan``

    def __getitem__(self, name: str) -> TopicSpec:
        return next(t for t in self.topics if t.name == name)


@dataclass(frozen=True)
class Found:
    """One topic as a cluster has it. ``replication``: the fewest replicas of any
    partition; ``configs``: its effective configs (None: not described, e.g. refused)."""
    name: str
    partitions: int
    replication: int
    configs: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Tools:
    """The fixes an operator runs: Kafka's tools with the given ``--bootstrap-server`` and
    ``--command-config`` (a path, never its content), and ``dpstream topics`` with the
    flags that make the same plan (``flags``)."""
    bootstrap: str
    command_config: str | None = None
    flags: str = ""

    def topics(self, action: str) -> str:
        return f"dpstream topics {action}{self.flags}"

    def _common(self) -> str:
        config = f" --command-config {shlex.quote(self.command_config)}" if self.command_config else ""
        return f"--bootstrap-server {shlex.quote(self.bootstrap)}{config}"

    def create(self, spec: TopicSpec) -> str:
        configs = "".join(f" --config {k}={shlex.quote(v)}" for k, v in spec.configs.items())
        return (f"kafka-topics.sh {self._common()} --create --if-not-exists --topic {shlex.quote(spec.name)} "
                f"--partitions {spec.partitions} --replication-factor {spec.replication}{configs}")

    def alter(self, topic: str, key: str, value: str) -> str:
        return (f"kafka-configs.sh {self._common()} --alter --entity-type topics "
                f"--entity-name {shlex.quote(topic)} --add-config {key}={shlex.quote(value)}")


@dataclass(frozen=True)
class Difference:
    """One way a deployment differs from the plan. ``change``: the config (key, planned
    value) whose AlterConfigs fixes it; ``fix``: what to do otherwise (None for a
    missing topic: ``Tools.apply``)."""
    topic: str
    setting: str
    found: str
    planned: str
    severity: str
    why: str
    change: tuple[str, str] | None = None
    fix: str | None = None

    def line(self, tools: Tools) -> str:
        """One line: what differs, why it matters and the fix."""
        fix = tools.alter(self.topic, *self.change) if self.change else self.fix or tools.topics("apply")
        what = "missing" if self.setting == "topic" else f"{self.setting} {self.found}, the plan says {self.planned}"
        return f"{self.topic}: {what} ({self.why}); fix: {fix}"


def plan(cluster: Cluster, *, prefix: str = "", app_id: str | None = None,
         partitions: int = DEFAULT_PARTITIONS, replication: int | None = None,
         min_insync: int | None = None) -> Plan:
    """Every topic of one deployment (a topic prefix and the worker's app id), with the
    numbers chosen as the module docstring says. PlanError when they cannot be placed."""
    app_id = prefix + "dpstream" if app_id is None else app_id
    brokers, default, broker_min = cluster.brokers, cluster.default_replication, cluster.min_insync
    if partitions < 1:
        raise PlanError(f"--partitions {partitions}: give at least 1")
    if replication is not None and replication > brokers:
        raise PlanError(f"--replication-factor {replication} is above the cluster's {brokers} broker(s): "
                        f"give at most {brokers}")
    if replication is None and default is not None and default > brokers:
        raise PlanError(f"the broker's default.replication.factor {default} is above the cluster's "
                        f"{brokers} broker(s): give --replication-factor {min(STATE_REPLICATION, brokers)}")
    state_rf = replication or max(min(STATE_REPLICATION, brokers), default or 0)
    if min_insync is not None and min_insync > state_rf:
        raise PlanError(f"--min-insync-replicas {min_insync} is above the state topics' replication factor "
                        f"{state_rf}, and would refuse every write with acks=all: give at most {state_rf}")
    broker_min = broker_min if broker_min and broker_min <= state_rf else None
    state_min = min_insync or max(min(STATE_MIN_INSYNC, state_rf), broker_min or 0)
    io_rf = replication or default or min(STATE_REPLICATION, brokers)
    kept = {**KEPT, "min.insync.replicas": str(state_min)}
    compacted = {**COMPACTED, "min.insync.replicas": str(state_min)}

    def spec(name: str, base: str, role: str, configs=None, partitions=partitions) -> TopicSpec:
        copartitioned = base in COPARTITIONED or base in TABLES
        if role == STATE:
            return TopicSpec(name, base, role, partitions, state_rf, configs or {}, copartitioned)
        return TopicSpec(name, base, role, partitions, io_rf, configs or {}, copartitioned,
                         replication_known=replication is not None or default is not None)

    topics = [spec(prefix + t, t, ROLE.get(t, OUTPUT), kept if t in STATE_TOPICS else None) for t in ALL]
    topics += [spec(changelog_name(app_id, table), table, STATE, compacted) for table in TABLES]
    topics.append(spec(f"{app_id}-__assignor-__leader", "assignor", INTERNAL, partitions=1))  # faust's leader
    rules = _rules(brokers, default, broker_min, replication, min_insync, state_rf, state_min, io_rf, partitions)
    return Plan(tuple(topics), cluster, rules)


def _rules(brokers, default, broker_min, replication, min_insync, state_rf, state_min, io_rf, partitions):
    """How ``plan`` chose its numbers, one line per role (module docstring)."""
    if replication:
        state_why = io_why = "--replication-factor"
    else:
        state_why = f"min({STATE_REPLICATION}, {brokers} broker(s))" + (
            f" or the broker's default.replication.factor {default}, the larger" if default else "")
        io_why = ("the broker's default.replication.factor" if default else
                  f"the broker's default not readable: min({STATE_REPLICATION}, {brokers} broker(s))")
    insync_why = "--min-insync-replicas" if min_insync else f"min({STATE_MIN_INSYNC}, {state_rf})" + (
        f" or the broker's min.insync.replicas {broker_min}, the larger" if broker_min else "")
    return (f"state: replication {state_rf} ({state_why}), min.insync.replicas {state_min} ({insync_why}); "
            "models, model-events and ledger kept forever (delete, no retention), the changelogs compacted",
            f"inputs, outputs and faust's assignor topic: replication {io_rf} ({io_why}); the broker's "
            "min.insync.replicas and retention",
            f"partitions: {partitions} for every topic but the assignor's (1); the inputs, model-events and "
            "the changelogs must keep that one count")


def compare(the_plan: Plan, found: Mapping[str, Found]) -> list[Difference]:
    """Each way ``found`` (the deployment's topics by name; a topic absent is missing)
    differs from the plan, most severe first (module docstring: what counts)."""
    out: list[Difference] = []
    counts = {found[t.name].partitions for t in the_plan.topics if t.copartitioned and t.name in found}
    for spec in the_plan.topics:
        have = found.get(spec.name)
        if have is None:
            out.append(Difference(spec.name, "topic", "missing", "present", NOTE if spec.role == INTERNAL else REFUSED,
                                  "faust creates it when the worker may" if spec.role == INTERNAL else
                                  "the worker reads or writes it"))
            continue
        out += _partitions(spec, have, counts)
        out += _replication(spec, have, the_plan.cluster)
        if have.configs is not None:
            out += _configs(spec, have)
    order = {REFUSED: 0, AT_RISK: 1, NOTE: 2}
    return sorted(out, key=lambda d: order[d.severity])


def _partitions(spec: TopicSpec, have: Found, counts: set[int]) -> list[Difference]:
    if have.partitions == spec.partitions:
        return []
    if not spec.copartitioned:
        return [Difference(spec.name, "partitions", str(have.partitions), str(spec.partitions), NOTE,
                           "its records spread over the topic's own partitions; nothing depends on the count",
                           fix="none needed")]
    if len(counts) == 1:
        fix = (f"give --partitions {have.partitions} to the worker and to dpstream topics (every "
               f"co-partitioned topic has {have.partitions})")
    else:
        fix = (f"recreate it with {spec.partitions} partitions (adding partitions moves models away from their "
               "state): the inputs, model-events and the changelogs must share one count")
    return [Difference(spec.name, "partitions", str(have.partitions), str(spec.partitions), REFUSED,
                       "a model's inputs, log and state must share one partition number, "
                       "murmur2(model id) mod --partitions", fix=fix)]


def _replication(spec: TopicSpec, have: Found, cluster: Cluster) -> list[Difference]:
    if have.replication >= spec.replication or not spec.replication_known:
        return []
    state = spec.role == STATE
    return [Difference(spec.name, "replication", str(have.replication), str(spec.replication),
                       AT_RISK if state else NOTE,
                       "a lost disk could lose it" if state else "fewer copies than planned",
                       fix=f"kafka-reassign-partitions.sh --execute, {spec.replication} replicas per partition "
                           f"(the cluster has {cluster.brokers} broker(s))")]


def _configs(spec: TopicSpec, have: Found) -> list[Difference]:
    configs = have.configs or {}
    out = []
    insync, planned_insync = _int(configs.get("min.insync.replicas")), _int(spec.configs.get("min.insync.replicas"))
    if insync is not None and insync > have.replication and spec.role != INTERNAL:
        out.append(Difference(spec.name, "min.insync.replicas", str(insync), f"at most {have.replication}", REFUSED,
                              f"above the topic's {have.replication} replica(s): every write with acks=all is refused",
                              change=("min.insync.replicas",
                                      str(min(planned_insync or STATE_MIN_INSYNC, have.replication)))))
    elif planned_insync is not None and insync is not None and insync < planned_insync:
        out.append(Difference(spec.name, "min.insync.replicas", str(insync), str(planned_insync), AT_RISK,
                              "a write acknowledged on fewer disks could be lost with one",
                              change=("min.insync.replicas", str(planned_insync))))
    for key, planned in spec.configs.items():
        if key != "min.insync.replicas" and configs.get(key) != planned:
            out.append(_config_difference(spec, key, configs.get(key), planned))
    return out


def _config_difference(spec: TopicSpec, key: str, value: str | None, planned: str) -> Difference:
    """A config of a state topic that is not the plan's, and what it costs."""
    kept = spec.base in STATE_TOPICS
    what = {LEDGER: "charges", MODEL_EVENTS: "the log that replay and the worker read",
            MODELS: "first registrations that replay needs"}.get(spec.base, "state")
    loses = REFUSED if spec.base in CHARGES or not kept else AT_RISK
    if key == "cleanup.policy" and kept:
        compacted = "compact" in (value or "").split(",")
        why = (f"compaction keeps the last record per model id: it deletes {what}" if compacted else
               f"the plan keeps {what} with cleanup.policy=delete and no retention")
        severity = loses if compacted else NOTE
    elif key == "cleanup.policy":
        why = "a restore needs every key's last value" + (
            ", and deletion by time forgets a model's state and spent budget" if "delete" in (value or "") else "")
        severity = REFUSED
    elif key == "retention.ms":
        why, severity = f"records older than {_duration(value)} are deleted, {what} with them", loses
    elif key == "retention.bytes":
        why, severity = f"records beyond {value} bytes per partition are deleted, {what} with them", loses
    else:
        why, severity = "a compaction setting: a restore then reads more history than state", NOTE
    return Difference(spec.name, key, str(value), planned, severity, why, change=(key, planned))


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _duration(ms: str | None) -> str:
    """``604800000`` -> ``7 days`` (a retention, for a reader)."""
    n = _int(ms)
    if n is None or n < 0:
        return f"{ms} ms"
    for unit, size in (("days", 86_400_000), ("hours", 3_600_000), ("minutes", 60_000)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} ms"
