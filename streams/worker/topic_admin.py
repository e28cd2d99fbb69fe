"""The topic plan (streams/worker/topic_plan.py) against a broker: what a cluster holds of
it (``read``), creating what is missing and altering the configs that differ
(``apply``, ``ensure_topics``), and the worker's start check (``start_check``).

Reading never creates a topic: the topics come from a Metadata request for every topic
the principal may describe (a request naming a missing topic may create it, with the
broker's defaults, where ``auto.create.topics.enable`` is on: a ledger created that way
would keep charges for the broker's default 7 days).

Altering: aiokafka 0.14 sends AlterConfigs, not IncrementalAlterConfigs, and AlterConfigs
replaces every config set on the topic. So ``apply`` sends the topic's own configs as
described (DescribeConfigs, source "dynamic topic config") with the plan's changes on top:
a change someone else makes between that read and the write is lost (run one ``apply``
at a time), and a topic with a sensitive config (described without its value) is
refused, naming kafka-configs.sh instead.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from .kafka import running
from .topics import ALL
from .topic_plan import (REFUSED, STATE, Cluster, Difference, Found, Plan, TopicSpec, Tools, compare,
                         plan)

logger = logging.getLogger("dpstream.topics")
DYNAMIC_TOPIC_CONFIG = 1              # DescribeConfigs' config_source of a topic's own setting
AUTHORIZATION = (29, 31)              # TOPIC_ / CLUSTER_AUTHORIZATION_FAILED
EXISTS, UNKNOWN = 36, 3               # TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION


class TopicsRefused(Exception):
    """The worker may not start on these topics (one line: what, why, the fix)."""


@dataclass
class Deployment:
    """What a cluster holds of a plan, as one principal sees it. ``own``: each topic's
    configs set on the topic itself (None for a sensitive one); ``undescribed``: topics
    whose configs were not given, with the broker's error code."""
    found: dict[str, Found] = field(default_factory=dict)
    own: dict[str, dict[str, str | None]] = field(default_factory=dict)
    undescribed: dict[str, int] = field(default_factory=dict)


@dataclass
class Applied:
    created: list[TopicSpec] = field(default_factory=list)
    altered: list[tuple[str, str, str, str]] = field(default_factory=list)     # topic, key, was, now
    failed: list[str] = field(default_factory=list)                            # one line each


async def read_cluster(admin) -> Cluster:
    """The broker count, and the broker's default.replication.factor and min.insync.replicas
    where this principal may read them (DescribeConfigs on the cluster)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    brokers = sorted(b["node_id"] for b in (await admin.describe_cluster())["brokers"])
    wanted = {"default.replication.factor": None, "min.insync.replicas": None}
    try:
        (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(brokers[0]),
                                                                   wanted)])
    except Exception as err:          # noqa: BLE001 - an answer the plan can do without
        logger.debug("broker configs not read (%s)", type(err).__name__)
        return Cluster(len(brokers))
    values = {}
    for resource in response.to_object()["resources"]:
        if resource["error_code"] == 0:
            values = {e["config_names"]: _int(e["config_value"]) for e in resource["config_entries"]}
    return Cluster(len(brokers), values.get("default.replication.factor"), values.get("min.insync.replicas"))


async def read(admin, the_plan: Plan, *, configs_of: Iterable[str] | None = None,
               expect: Iterable[str] = (), wait: float = 30.0) -> Deployment:
    """The plan's topics as the cluster has them; configs of ``configs_of`` (default: all).
    Each request goes to any broker, and one may not list a topic created a moment ago:
    the topics of ``expect`` (known to exist) are asked for again until listed, and
    configs a broker did not know yet (UNKNOWN_TOPIC_OR_PARTITION) too, for at most
    ``wait`` seconds; what is still missing after that is reported as it is."""
    names = {t.name for t in the_plan.topics}
    deadline = time.monotonic() + wait
    out = Deployment()
    while True:
        out.found = {t["topic"]: Found(t["topic"], len(t["partitions"]),
                                       min(len(p["replicas"]) for p in t["partitions"]))
                     for t in await _metadata(admin)
                     if t["topic"] in names and t["error_code"] == 0 and t["partitions"]}
        if set(expect) <= set(out.found) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.25)
    wanted = sorted(set(out.found) & (names if configs_of is None else set(configs_of)))
    while wanted:
        await _read_configs(admin, out, wanted)
        wanted = [n for n, code in out.undescribed.items() if code == UNKNOWN]
        if not wanted or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.25)
    return out


async def _read_configs(admin, out: Deployment, names: list[str]) -> None:
    """The configs of ``names`` into ``out`` (``undescribed`` for those refused)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    for response in await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names]):
        for resource in response.to_object()["resources"]:
            name = resource["resource_name"]
            if resource["error_code"]:
                out.undescribed[name] = resource["error_code"]
                continue
            out.undescribed.pop(name, None)
            entries = resource["config_entries"]
            have = out.found[name]
            out.found[name] = Found(name, have.partitions, have.replication,
                                    {e["config_names"]: e["config_value"] for e in entries})
            out.own[name] = {e["config_names"]: None if e["is_sensitive"] else e["config_value"]
                             for e in entries if e["config_source"] == DYNAMIC_TOPIC_CONFIG}


async def create(admin, specs: list[TopicSpec]) -> dict[str, tuple[int, str]]:
    """Create ``specs`` as planned: (error code, message) per topic (0: created)."""
    from aiokafka.admin import NewTopic
    if not specs:
        return {}
    response = await admin.create_topics([NewTopic(s.name, s.partitions, s.replication,
                                                   topic_configs=dict(s.configs)) for s in specs])
    return {e[0]: (e[1], (e[2] if len(e) > 2 else None) or "") for e in response.topic_errors}


async def alter(admin, topic: str, own: dict[str, str | None], changes: dict[str, str]) -> str | None:
    """Set ``changes`` on ``topic``, keeping its other own configs (module docstring);
    why not, or None when done."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    secret = sorted(k for k, v in own.items() if v is None)
    if secret:
        return (f"{topic} has a sensitive config ({', '.join(secret)}) that AlterConfigs would drop: "
                "set the changes with kafka-configs.sh --alter --add-config")
    responses = await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {**own, **changes})])
    for response in responses:
        for resource in response.to_object()["resources"]:
            if resource["error_code"]:
                code, message = resource["error_code"], resource["error_message"] or ""
                return f"{topic}: AlterConfigs refused: {_error(code, message)}"
    return None


async def apply(admin, the_plan: Plan) -> tuple[Applied, list[Difference]]:
    """Create every missing topic of the plan and alter the configs that differ; what was
    done, and the differences left (those no AlterConfigs fixes: replication, partitions)."""
    done = Applied()
    deployment = await read(admin, the_plan)
    missing = [t for t in the_plan.topics if t.name not in deployment.found]
    for name, (code, message) in (await create(admin, missing)).items():
        if code == 0:
            done.created.append(the_plan[name])
        elif code != EXISTS:
            done.failed.append(f"{name}: not created: {_error(code, message)}")
    if done.created:
        await wait_led(admin, [t.name for t in done.created])
    changes: dict[str, dict[str, tuple[str, str]]] = {}
    for diff in compare(the_plan, deployment.found):
        if diff.change and diff.topic in deployment.own:
            changes.setdefault(diff.topic, {})[diff.change[0]] = (diff.found, diff.change[1])
    for topic, change in changes.items():
        problem = await alter(admin, topic, deployment.own[topic], {k: v for k, (_, v) in change.items()})
        if problem:
            done.failed.append(problem)
        else:
            done.altered += [(topic, key, was, now) for key, (was, now) in change.items()]
    present = set(deployment.found) | {t.name for t in done.created}
    left = compare(the_plan, (await read(admin, the_plan, expect=present)).found)
    return done, left


async def ensure_topics(kafka, *, prefix: str = "", partitions: int = 4, replication: int | None = None,
                        app_id: str | None = None, wait: float = 60.0) -> list[str]:
    """Create the dpstream topics that do not exist yet as planned (and, given ``app_id``,
    the worker's changelogs and faust's assignor topic), then wait until the broker lists
    each with a leader per partition: the names created. For tests, benches and tools;
    the worker runs ``start_check``."""
    async with running(kafka.admin(request_timeout_ms=10_000)) as admin:
        the_plan = plan(await read_cluster(admin), prefix=prefix, app_id=app_id, partitions=partitions,
                        replication=replication)
        wanted = [t for t in the_plan.topics if app_id is not None or t.base in ALL]
        have = {t["topic"] for t in await _metadata(admin)}
        answers = await create(admin, [t for t in wanted if t.name not in have])
        _raise_refused(answers)
        await wait_led(admin, [t.name for t in wanted], wait)
        return sorted(n for n, (code, _) in answers.items() if code == 0)


@dataclass(frozen=True)
class Checked:
    """What the worker's start check found: the topics it created, one warning line per
    difference that does not stop it, and the state topics' replication (faust's
    ``topic_replication_factor``, for a topic it would declare)."""
    created: list[str]
    warnings: list[str]
    replication: int


async def start_check(kafka, tools: Tools, *, prefix: str, app_id: str, partitions: int,
                      replication: int | None = None, min_insync: int | None = None,
                      wait: float = 60.0) -> Checked:
    """The worker's check before it starts: every topic of the plan exists (created as
    planned where the principal may), and none would break the worker or lose charges
    (``Checked``). TopicsRefused (one line) for a topic missing that it may not create,
    the configs of a state topic it cannot read, or a difference that stops the worker
    (topic_plan.REFUSED); PlanError for flags the cluster cannot take."""
    async with running(kafka.admin(request_timeout_ms=10_000)) as admin:
        the_plan = plan(await read_cluster(admin), prefix=prefix, app_id=app_id, partitions=partitions,
                        replication=replication, min_insync=min_insync)
        have = {t["topic"] for t in await _metadata(admin)}
        missing = [t for t in the_plan.topics if t.name not in have]
        answers = await create(admin, missing)
        refused = sorted(n for n, (code, _) in answers.items() if code in AUTHORIZATION)
        if refused:
            raise TopicsRefused(
                f"not authorized: principal {kafka.principal} may not Describe and Create the topics "
                f"({', '.join(refused)}) (TopicAuthorizationFailedError): if they are missing, an admin creates "
                f"them with `{tools.topics('apply')}`; if they exist, an admin grants the worker's rights with "
                "`dpstream acls --apply` (docs/deployment.md)")
        _raise_refused(answers)
        await wait_led(admin, [t.name for t in the_plan.topics], wait)
        state = [t.name for t in the_plan.topics if t.role == STATE]
        present = have | {n for n, (code, _) in answers.items() if code == 0}
        deployment = await read(admin, the_plan, configs_of=state, expect=present, wait=wait)
    hidden = sorted(n for n, code in deployment.undescribed.items() if code in AUTHORIZATION)
    if hidden:
        raise TopicsRefused(
            f"not authorized: principal {kafka.principal} may not DescribeConfigs topic {hidden[0]}"
            + (f" (and {', '.join(hidden[1:])})" if hidden[1:] else "")
            + ": the worker checks that the state topics keep every charge and state record before it starts; "
            "an admin grants it with `dpstream acls --apply` (docs/deployment.md)")
    if deployment.undescribed:                # fail closed: an unread retention is not a kept one
        name, code = sorted(deployment.undescribed.items())[0]
        raise TopicsRefused(f"the broker did not describe the configs of {name} (error {code}, "
                            f"{_error(code, '')}): the worker checks that the state topics keep every "
                            "charge and state record before it starts; start it again")
    differences = compare(the_plan, deployment.found)
    stops = [d for d in differences if d.severity == REFUSED]
    if stops:
        more = f" (and {len(stops) - 1} more: `{tools.topics('check')}`)" if stops[1:] else ""
        raise TopicsRefused(f"refused to start: {stops[0].line(tools)}{more}")
    return Checked(sorted(n for n, (code, _) in answers.items() if code == 0),
                   [f"warning: {d.line(tools)}" for d in differences],
                   max(t.replication for t in the_plan.topics if t.role == STATE))


async def wait_led(admin, names: list[str], wait: float = 60.0) -> None:
    """Wait until the broker's metadata lists every topic of ``names`` with a leader for
    each partition, at most ``wait`` seconds: a broker that just created (or restarted)
    answers "unknown topic" for a while, and a consumer that subscribed meanwhile ignores
    the topic until its next metadata refresh."""
    from aiokafka.errors import for_code
    start = time.monotonic()
    while True:           # the topics exist (found or created): naming them creates none
        listed = {t["topic"]: t for t in await admin.describe_topics(names)}
        refused = sorted(n for n, t in listed.items() if t["error_code"] in AUTHORIZATION)
        if refused:
            raise for_code(listed[refused[0]]["error_code"])(", ".join(refused))
        if all(n in listed and _led(listed[n]) for n in names):
            break
        if time.monotonic() - start > wait:
            logger.warning("topic metadata still incomplete after %.0f s; going on", wait)
            break
        await asyncio.sleep(0.25)
    if time.monotonic() - start > 1.0:
        logger.warning("waited %.1f s for the broker to list every topic", time.monotonic() - start)


async def _metadata(admin) -> list[dict]:
    """Every topic the principal may describe (a Metadata request for all topics: it never
    creates one, module docstring)."""
    return await admin.describe_topics()


def _led(topic: dict) -> bool:
    return topic["error_code"] == 0 and bool(topic["partitions"]) and \
        all(p["leader"] >= 0 for p in topic["partitions"])


def _raise_refused(answers: dict[str, tuple[int, str]]) -> None:
    """Raise the broker's refusal of a creation (an authorization error, a bad config), as
    aiokafka's error for its code: already there (36) passes."""
    from aiokafka.errors import for_code
    for name, (code, message) in sorted(answers.items()):
        if code not in (0, EXISTS):
            raise for_code(code)(f"{name}: {message}" if message else name)


def _error(code: int, message: str) -> str:
    from aiokafka.errors import for_code
    return f"{for_code(code).__name__}{': ' + message if message else ''}"


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
