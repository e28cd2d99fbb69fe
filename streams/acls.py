"""Least privilege: the principals a dpstream deployment needs and the exact ACLs of each
(``dpstream acls --print | --apply``).

One topic prefix per team (``--prefix P``) gives multi-tenancy: every name below is P +
the dpstream name, and a worker's app id (its consumer group, the prefix of its table
changelogs and of faust's internal topics) must start with P too (the worker's default
app id is P + "dpstream").

| principal | may | may not |
|---|---|---|
| worker | read the inputs; read and write ``model-events`` and its own changelogs and internal topics (prefix: the app id); write the outputs; create its topics; use its consumer group | write ``models``, ``examples`` or ``queries`` |
| producer | write ``examples`` | read anything |
| querier | write ``queries``; read ``answers`` (query answers only) | read ``predictions`` (one record per example), ``examples``, ``model-events``, changelogs |
| consumer | read ``predictions`` | read ``examples``, ``model-events``, changelogs; write anything |
| auditor | read the public topics: ``models``, ``ledger``, ``predictions``, ``answers``, ``releases``, ``rejected`` | read ``examples``, ``model-events``, changelogs; write anything |
| admin | everything (the broker's super user): write ``models``, export the private log for a keyed replay, manage ACLs | |

The private topics (``examples``, ``model-events``, the changelogs) are readable only by
the worker and the admin; ``ledger``, ``predictions``, ``releases`` and ``rejected`` are
writable only by the worker; ``models`` only by the admin. ACLs are created through the
admin API (Kafka's CreateAcls request, through streams/faust_seam.py); ``--remove``
deletes a prefix's ACLs but keeps the cluster-wide IdempotentWrite every prefix shares.
"""
from __future__ import annotations

from dataclasses import dataclass

from .topics import (ANSWERS, EXAMPLES, INPUTS, LEDGER, MODEL_EVENTS, MODELS, OUTPUTS, PREDICTIONS,
                     QUERIES)

# Kafka's ACL enums (org.apache.kafka.common.acl / resource)
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
OPERATIONS = {"Read": 3, "Write": 4, "Create": 5, "Describe": 8, "DescribeConfigs": 10,
              "IdempotentWrite": 12}
ALLOW = 3
RESOURCE_NAMES = {TOPIC: "topic", GROUP: "group", CLUSTER: "cluster"}
ROLES = ("worker", "producer", "querier", "consumer", "auditor")
PUBLIC = (MODELS, LEDGER, PREDICTIONS, ANSWERS, "releases", "rejected")


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


def plan(prefix: str = "", app_id: str | None = None, users: dict[str, str] | None = None) -> list[Acl]:
    """The ACLs of every role (module docstring); ``users`` maps a role to its user name
    (default: the role's name)."""
    app_id = prefix + "dpstream" if app_id is None else app_id
    if not app_id.startswith(prefix):
        raise ValueError(f"the worker's app id {app_id!r} must start with the topic prefix {prefix!r}")
    name = {role: f"User:{(users or {}).get(role, role)}" for role in ROLES}
    acls: list[Acl] = []

    def allow(role, operations, resource_type, resource, pattern=LITERAL):
        acls.extend(Acl(name[role], op, resource_type, resource, pattern) for op in operations)

    for topic in INPUTS:
        allow("worker", ("Read", "Describe", "Create"), TOPIC, prefix + topic)
    allow("worker", ("Read", "Write", "Describe", "Create"), TOPIC, prefix + MODEL_EVENTS)
    for topic in OUTPUTS:
        allow("worker", ("Write", "Describe", "Create"), TOPIC, prefix + topic)
    allow("worker", ("Read", "Write", "Describe", "Create", "DescribeConfigs"), TOPIC, app_id, PREFIXED)
    allow("worker", ("Read", "Describe"), GROUP, app_id, PREFIXED)
    allow("worker", ("IdempotentWrite",), CLUSTER, "kafka-cluster")
    allow("producer", ("Write", "Describe"), TOPIC, prefix + EXAMPLES)
    allow("producer", ("IdempotentWrite",), CLUSTER, "kafka-cluster")
    allow("querier", ("Write", "Describe"), TOPIC, prefix + QUERIES)
    allow("querier", ("IdempotentWrite",), CLUSTER, "kafka-cluster")
    allow("querier", ("Read", "Describe"), TOPIC, prefix + ANSWERS)     # not one record per example
    allow("consumer", ("Read", "Describe"), TOPIC, prefix + PREDICTIONS)
    for topic in PUBLIC:
        allow("auditor", ("Read", "Describe"), TOPIC, prefix + topic)
    return acls
