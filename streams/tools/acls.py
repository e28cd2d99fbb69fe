"""Least privilege: the principals a dpstream deployment needs and the exact ACLs of each
(``dpstream acls --print | --apply | --remove``); threat model in docs/security.md.

One topic prefix per team is one tenant (``--prefix P``): every topic name below is P +
the dpstream name, the tenant's principals are its own (default: P + the role, e.g.
``a-worker``; ``--user ROLE=NAME`` names them), and its worker's app id (its consumer
group and the first part of its internal topics' names) is P + a name (default P +
"dpstream"). Every ACL names one resource LITERALLY: a PREFIXED pattern on the app id
gave the default tenant's worker (app id ``dpstream``) every topic and group starting
with "dpstream", another tenant's ``dpstream-prod-examples`` included (issue 41, item 2).

| principal | may | may not |
|---|---|---|
| worker | read the inputs; read and write ``model-events``, its changelogs and faust's assignor topic (literal names, ``worker_topics``); write the outputs; create its topics; describe the configs of the state topics (``STATE_TOPICS`` and its changelogs: its start check, streams/worker/topic_admin.py); use its consumer group (the app id) | write ``models``, ``examples`` or ``queries``; touch another tenant's topics or groups |
| producer | write ``examples``; read ``models`` (public configuration: ``dpstream produce`` checks the model ids and the declared features before sending) | read anything else |
| querier | write ``queries``; read ``answers`` (query answers only) and ``models`` | read ``predictions`` (one record per example), ``examples``, ``model-events``, changelogs |
| consumer | read ``predictions`` | read ``examples``, ``model-events``, changelogs; write anything |
| auditor | read the public topics: ``models``, ``ledger``, ``predictions``, ``answers``, ``releases``, ``rejected`` (all ``dpstream replay --no-key`` and ``dpstream export --public`` read) | read ``examples``, ``model-events``, changelogs; write anything |
| admin | everything (the broker's super user): write ``models``, export the private log for a keyed replay, manage ACLs | |

The worker's Create rights are optional: on topics an admin created as planned (``dpstream
topics apply``), a worker without them starts (``needed`` says which rights it cannot do
without, ``uncovered`` which of those a cluster's ACLs do not grant).

The private topics (``examples``, ``model-events``, the changelogs) are readable only by
the worker and the admin; ``ledger``, ``predictions``, ``releases`` and ``rejected`` are
writable only by the worker; ``models`` only by the admin. Every tenant's producers also
hold the cluster-wide IdempotentWrite (it names no topic), which ``--remove`` keeps.

``plan`` checks what it can alone (names Kafka accepts, an app id that is the prefix
plus a name, so the app id cannot be a wildcard or another tenant's prefix);
``overlaps`` checks a plan against the ACLs a cluster already has (a resource of the
plan granted to a principal outside it, or a principal of the plan holding rights
outside it: either would join two tenants). ACLs go through Kafka's CreateAcls,
DescribeAcls and DeleteAcls requests (streams/worker/faust_seam.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from dpstream.streams.worker.topics import (ANSWERS, EXAMPLES, INPUTS, LEDGER, MODEL_EVENTS, MODELS, OUTPUTS,
                                           PREDICTIONS, QUERIES, STATE_TOPICS)

# Kafka's ACL enums (org.apache.kafka.common.acl / resource)
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
OPERATIONS = {"Read": 3, "Write": 4, "Create": 5, "Describe": 8, "DescribeConfigs": 10,
              "IdempotentWrite": 12}
ALLOW = 3
RESOURCE_NAMES = {TOPIC: "topic", GROUP: "group", CLUSTER: "cluster"}
ROLES = ("worker", "producer", "querier", "consumer", "auditor")
PUBLIC = (MODELS, LEDGER, PREDICTIONS, ANSWERS, "releases", "rejected")
# The worker's tables (streams/worker/state.py: changelogs f"{app_id}-{table}-changelog",
# faust's naming) and faust's own internal topic, the leader assignor's
# f"{app_id}-__assignor-__leader" (faust/assignor/leader_assignor.py).
# tests/streams/test_attacks_broker.py checks these against a real WorkerApp.
TABLES = ("sequencer-state", "model-state")
ALL_OPERATIONS, DENY = 2, 2
# Kafka's implied rights (AclAuthorizer / StandardAuthorizer): Read, Write, Delete and
# Alter imply Describe; AlterConfigs implies DescribeConfigs.
IMPLIED_BY = {"Describe": (3, 4, 6, 7), "DescribeConfigs": (11,)}
NAME = re.compile(r"[A-Za-z0-9._-]*")
USER = re.compile(r"[A-Za-z0-9._@+-]+")     # never "*", Kafka's wildcard principal
MAX_TOPIC = 249                       # Kafka's longest topic name


@dataclass(frozen=True)
class Acl:
    principal: str          # "User:worker"
    operation: str          # a key of OPERATIONS
    resource_type: int
    resource: str
    pattern: int = LITERAL

    def describe(self) -> str:
        kind = RESOURCE_NAMES[self.resource_type]
        where = "kafka-cluster" if self.resource_type == CLUSTER else self.resource
        prefixed = " (prefix)" if self.pattern == PREFIXED else ""
        return f"ALLOW {self.principal:22s} {self.operation:16s} {kind} {where}{prefixed}"

    @property
    def key(self) -> tuple:
        return (self.resource_type, self.resource, self.pattern, self.principal, self.operation)

    def request_fields(self) -> tuple:
        """The fields of this ACL in Kafka's CreateAcls / DeleteAcls requests: resource type,
        name, pattern, principal, host (any), operation and permission codes."""
        return (self.resource_type, self.resource, self.pattern, self.principal, "*",
                OPERATIONS[self.operation], ALLOW)


def worker_topics(app_id: str) -> tuple[str, ...]:
    """The internal topics a worker with this app id reads, writes and creates."""
    return tuple(f"{app_id}-{table}-changelog" for table in TABLES) + (f"{app_id}-__assignor-__leader",)


def principals(prefix: str = "", users: dict[str, str] | None = None) -> dict[str, str]:
    """Each role's principal: ``users[role]`` when given, else the prefix + the role."""
    return {role: f"User:{(users or {}).get(role) or prefix + role}" for role in ROLES}


def check_names(prefix: str, app_id: str) -> None:
    """Refuse what would let one tenant's rights reach another's (module docstring)."""
    for what, value in (("--prefix", prefix), ("--app-id", app_id)):
        if not NAME.fullmatch(value):
            raise ValueError(f"{what} {value!r}: use letters, digits, '.', '_' and '-' only "
                             "(Kafka's topic name characters; '*' would be a wildcard)")
    if not app_id.startswith(prefix) or app_id == prefix:
        raise ValueError(f"--app-id {app_id!r}: the worker's app id must start with the topic prefix {prefix!r} "
                         f"and go on with a name (default {prefix + 'dpstream'!r}), so that its group and "
                         "internal topics stay in its tenant")
    longest = max(worker_topics(app_id), key=len)
    if len(longest) > MAX_TOPIC:
        raise ValueError(f"--app-id {app_id!r}: its internal topic {longest!r} would be longer than "
                         f"Kafka's {MAX_TOPIC} characters")


def plan(prefix: str = "", app_id: str | None = None, users: dict[str, str] | None = None) -> list[Acl]:
    """The ACLs of every role (module docstring), every resource named literally."""
    app_id = prefix + "dpstream" if app_id is None else app_id
    check_names(prefix, app_id)
    for role, user in (users or {}).items():
        if not USER.fullmatch(user):
            raise ValueError(f"--user {role}={user!r}: a user name is letters, digits and '._@+-' "
                             "('User:*' would grant the role to every user)")
    name = principals(prefix, users)
    acls: list[Acl] = []

    def allow(role, operations, resource_type, resource):
        acls.extend(Acl(name[role], op, resource_type, resource) for op in operations)

    for topic in INPUTS:
        allow("worker", ("Read", "Describe", "Create"), TOPIC, prefix + topic)
    allow("worker", ("Read", "Write", "Describe", "Create"), TOPIC, prefix + MODEL_EVENTS)
    for topic in OUTPUTS:
        allow("worker", ("Write", "Describe", "Create"), TOPIC, prefix + topic)
    for topic in STATE_TOPICS:          # the start check reads their retention and cleanup policy
        allow("worker", ("DescribeConfigs",), TOPIC, prefix + topic)
    for topic in worker_topics(app_id):
        allow("worker", ("Read", "Write", "Describe", "Create", "DescribeConfigs"), TOPIC, topic)
    allow("worker", ("Read", "Describe"), GROUP, app_id)
    allow("worker", ("IdempotentWrite",), CLUSTER, "kafka-cluster")
    allow("producer", ("Write", "Describe"), TOPIC, prefix + EXAMPLES)
    allow("producer", ("Read", "Describe"), TOPIC, prefix + MODELS)       # public configuration
    allow("producer", ("IdempotentWrite",), CLUSTER, "kafka-cluster")
    allow("querier", ("Write", "Describe"), TOPIC, prefix + QUERIES)
    allow("querier", ("IdempotentWrite",), CLUSTER, "kafka-cluster")
    allow("querier", ("Read", "Describe"), TOPIC, prefix + ANSWERS)     # not one record per example
    allow("querier", ("Read", "Describe"), TOPIC, prefix + MODELS)
    allow("consumer", ("Read", "Describe"), TOPIC, prefix + PREDICTIONS)
    for topic in PUBLIC:
        allow("auditor", ("Read", "Describe"), TOPIC, prefix + topic)
    return acls


def overlaps(acls: list[Acl], existing: list[tuple]) -> list[str]:
    """What in a cluster's ACLs (``existing``: (resource type, name, pattern, principal,
    operation) as faust_seam.describe_acls gives them) would join this plan's tenant to
    another: a topic or group of the plan granted to a principal outside the plan (by
    name, by a prefix pattern or by the wildcard), or a principal of the plan holding a
    right on a resource outside it. Cluster-wide rights (IdempotentWrite) are shared and
    never count. Empty: the plan stands alone."""
    mine = {a.principal for a in acls}
    resources = {(a.resource_type, a.resource) for a in acls if a.resource_type != CLUSTER}
    operation = {v: k for k, v in OPERATIONS.items()}
    covers, outside = [], []          # another tenant's grants first: they say the most
    for resource_type, name, pattern, principal, op in existing:
        if resource_type == CLUSTER:
            continue
        kind = RESOURCE_NAMES.get(resource_type, f"resource type {resource_type}")
        what = f"{kind} {name}" + (" (prefix)" if pattern == PREFIXED else "")
        right = operation.get(op, f"operation {op}")
        if principal not in mine:
            covered = [r for t, r in sorted(resources) if t == resource_type and
                       (name == "*" or r == name or (pattern == PREFIXED and r.startswith(name)))]
            if covered:
                covers.append(f"{principal} already holds {right} on {what}, which covers this plan's "
                              f"{kind} {covered[0]}")
        elif pattern != LITERAL or (resource_type, name) not in resources:
            outside.append(f"{principal} already holds {right} on {what}, outside this plan")
    return sorted(covers, key=lambda line: " group " not in line) + outside


def needed(acls: list[Acl]) -> list[Acl]:
    """The rights of ``acls`` a worker cannot do without: all but Create (module docstring)."""
    return [a for a in acls if a.operation != "Create"]


def uncovered(wanted: list[Acl], allowed: list[tuple], denied: list[tuple]) -> list[Acl]:
    """The ACLs of ``wanted`` that a cluster does not grant: no ALLOW entry of ``allowed``
    covers it (its principal or ``User:*``; its resource by name, by a prefix pattern or
    by the wildcard; its operation, All, or one that implies it), or a DENY entry of
    ``denied`` takes it away (the operation or All). Entries: (resource type, name,
    pattern, principal, operation code), as faust_seam.describe_acls gives them."""
    def covers(entry: tuple, acl: Acl, operations: tuple[int, ...]) -> bool:
        resource_type, name, pattern, principal, op = entry
        return (principal in (acl.principal, "User:*") and resource_type == acl.resource_type
                and (name == "*" or name == acl.resource if pattern == LITERAL else
                     pattern == PREFIXED and acl.resource.startswith(name))
                and op in operations)
    out = []
    for acl in wanted:
        code = OPERATIONS[acl.operation]
        granting = (code, ALL_OPERATIONS, *IMPLIED_BY.get(acl.operation, ()))
        if not any(covers(e, acl, granting) for e in allowed) or \
                any(covers(e, acl, (code, ALL_OPERATIONS)) for e in denied):
            out.append(acl)
    return out
