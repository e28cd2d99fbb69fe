"""``dpstream topics plan | apply | check``: the topics of one deployment per role
(streams/worker/topic_plan.py: replication, min.insync.replicas, partitions, cleanup and
retention), run as an admin (``--command-config`` an admin's client config).

* ``plan`` prints every topic with its settings, one line each, then the same as
  ``kafka-topics.sh --create`` commands (with the ``--bootstrap-server`` and
  ``--command-config`` given); it reads the cluster's broker count and defaults.
* ``apply`` creates what is missing and alters the configs that differ
  (streams/worker/topic_admin.py ``apply``), one line per change; what no AlterConfigs
  fixes (replication, partitions) is printed as ``check`` prints it.
* ``check`` prints each difference between the cluster and the plan on one line, and
  whether the worker's principal holds the rights it needs (streams/tools/acls.py
  ``needed``: all but Create), when this principal may describe the cluster's ACLs.

Exit codes: 0 as planned (``check``: nothing that breaks the worker or loses state);
1 a difference that would (a ``refused`` or ``at risk`` line), or a right the worker
lacks; 2 flags the cluster cannot take (a replication factor above its broker count).
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dpstream.streams.worker.topics import DEFAULT_PARTITIONS

if TYPE_CHECKING:                      # the plan imports faust (state.py): only when a command runs
    from dpstream.streams.worker.topic_admin import Applied
    from dpstream.streams.worker.topic_plan import Difference, Plan

ACTIONS = ("plan", "apply", "check")
# Why a cluster's ACLs could not be described (DescribeAcls error codes)
WHY_NOT = {54: "the broker has no authorizer (SECURITY_DISABLED): every principal may do everything",
           31: "this principal may not describe the cluster's ACLs (run as an admin; a topic it may not "
               "describe also looks missing here)"}


def _at_least_one(text: str) -> int:
    """An argparse type: a whole number, 1 or more."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: a whole number, 1 or more")
    return n


def replication_flags(parser) -> None:
    """``--replication-factor`` and ``--min-insync-replicas`` (``topics`` and ``worker``)."""
    parser.add_argument("--replication-factor", type=_at_least_one, metavar="N",
                        help="replicas of every topic (default: the state topics min(3, brokers) or the "
                             "broker's default.replication.factor, the larger; the others the broker's "
                             "default); refused above the cluster's broker count")
    parser.add_argument("--min-insync-replicas", type=_at_least_one, metavar="N",
                        help="min.insync.replicas of the state topics (default: min(2, their replication) or "
                             "the broker's, the larger); the others keep the broker's")


def add_parser(sub, broker) -> None:
    """The ``topics`` command on ``sub`` (``broker`` adds the connection flags)."""
    p = sub.add_parser("topics", help="plan, create or check the topics per role (replication, retention)",
                       description="The topics of one deployment per role: state (models, model-events, "
                       "ledger, the worker's changelogs: replicated, never deleted by time), inputs and "
                       "outputs (the operator's retention). plan: print them and the kafka-topics.sh "
                       "commands; apply: create what is missing, alter configs that differ; check: "
                       "print each difference and the worker's missing rights, exit 1 if one would "
                       "break the worker or lose state. Run as an admin.")
    p.add_argument("action", choices=ACTIONS, help="plan, apply or check")
    broker(p)
    p.add_argument("--partitions", type=_at_least_one, default=DEFAULT_PARTITIONS, metavar="N",
                   help="partitions of every topic; the worker's --partitions must be the same "
                        "(default: %(default)s)")
    replication_flags(p)
    p.add_argument("--app-id", help="the worker's app id, which names its changelogs (default: the prefix + "
                   "'dpstream')")
    p.add_argument("--user", action="append", metavar="worker=NAME",
                   help="check: the worker's user name, as `dpstream acls --user` gives it (default: the "
                        "prefix + 'worker')")
    p.set_defaults(fn=cmd_topics)


def tools(args, bootstrap: str, command_config: str | None):
    """The fix commands for this plan: Kafka's tools and ``dpstream topics`` with the same
    flags (``command_config``: a path or a placeholder, never a file's content)."""
    from dpstream.streams.worker.topic_plan import Tools
    given = [("--bootstrap-server", bootstrap), ("--command-config", command_config),
             ("--prefix", args.prefix or None), ("--app-id", args.app_id),
             ("--partitions", args.partitions if args.partitions != DEFAULT_PARTITIONS else None),
             ("--replication-factor", args.replication_factor), ("--min-insync-replicas", args.min_insync_replicas)]
    flags = "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in given if value is not None)
    return Tools(bootstrap, command_config, flags)


@dataclass
class Outcome:
    """What one ``topics`` run found and did: the plan; ``applied`` (apply); the
    differences left (apply, check); the worker's missing rights and, when they were not
    checked, why (check)."""
    plan: Plan
    applied: Applied | None = None
    left: list[Difference] = field(default_factory=list)
    missing_rights: list | None = None
    rights_not_checked: str | None = None


def cmd_topics(args) -> int:
    from dpstream.streams.tools.acls import check_names
    from dpstream.streams.worker.topic_plan import PlanError

    from .commands import Failed, _broker_call, _kafka
    app_id = args.app_id or args.prefix + "dpstream"
    try:
        check_names(args.prefix, app_id)
        users = _worker_user(args.user)
    except ValueError as err:
        raise Failed(str(err), 2) from None
    kafka = _kafka(args)
    fixes = tools(args, args.broker or kafka.bootstrap, args.client_config or os.environ.get("DPSTREAM_KAFKA_CONFIG"))
    try:
        outcome = _broker_call(kafka, _run(kafka, args, app_id, users), "Describe the cluster and its topics",
                               passing=(PlanError,))
    except PlanError as err:
        raise Failed(str(err), 2) from None
    if args.action == "plan":
        _print_plan(outcome.plan, fixes)
        return 0
    failed = _print_outcome(outcome, fixes, _acls_apply(args, fixes))
    _summary(args.action, outcome)
    return 1 if failed else 0


async def _run(kafka, args, app_id: str, users: dict[str, str]) -> Outcome:
    from dpstream.streams.worker.kafka import running
    from dpstream.streams.worker.topic_admin import apply, read, read_cluster
    from dpstream.streams.worker.topic_plan import compare, plan
    async with running(kafka.admin(request_timeout_ms=10_000)) as admin:
        outcome = Outcome(plan(await read_cluster(admin), prefix=args.prefix, app_id=app_id,
                               partitions=args.partitions, replication=args.replication_factor,
                               min_insync=args.min_insync_replicas))
        if args.action == "apply":
            outcome.applied, outcome.left = await apply(admin, outcome.plan)
        elif args.action == "check":
            outcome.left = compare(outcome.plan, (await read(admin, outcome.plan)).found)
            outcome.missing_rights, outcome.rights_not_checked = await _worker_rights(
                admin, args.prefix, app_id, users)
        return outcome


def _print_plan(the_plan: Plan, fixes) -> None:
    """How the numbers were chosen (comments), each topic, then kafka-topics.sh commands."""
    for line in the_plan.rules:
        print(f"# {line}")
    for spec in the_plan.topics:
        print(spec.describe())
    print("# the same with Kafka's tools:")
    for spec in the_plan.topics:
        print(fixes.create(spec))


def _print_outcome(outcome: Outcome, fixes, grant: str) -> bool:
    """One line per change, difference and missing right; whether any is serious."""
    from dpstream.streams.worker.topic_plan import NOTE
    failed = False
    if outcome.applied is not None:
        for spec in outcome.applied.created:
            print(f"created {spec.describe()}")
        for topic, key, was, now in outcome.applied.altered:
            print(f"altered {topic}: {key} {was} -> {now}")
        for line in outcome.applied.failed:
            print(f"failed  {line}")
        failed = bool(outcome.applied.failed)
    for diff in outcome.left:
        print(f"{diff.severity}: {diff.line(fixes)}")
    if outcome.rights_not_checked:
        print(f"note: the worker's rights were not checked: {outcome.rights_not_checked}")
    for acl in outcome.missing_rights or ():
        print(f"missing right: {acl.describe()}; fix: {grant}")
    return failed or bool(outcome.missing_rights) or any(d.severity != NOTE for d in outcome.left)


def _summary(action: str, outcome: Outcome) -> None:
    from dpstream.streams.worker.topic_plan import NOTE
    serious = sum(d.severity != NOTE for d in outcome.left)
    where = f"{len(outcome.plan.topics)} topics, {outcome.plan.cluster.brokers} broker(s)"
    if action == "apply":
        head = f"{len(outcome.applied.created)} created, {len({t for t, *_ in outcome.applied.altered})} altered"
    else:
        head = "as planned" if not outcome.left else f"{len(outcome.left)} difference(s)"
    rights = ""
    if action == "check":
        missing = len(outcome.missing_rights or ())
        rights = ("; the worker's rights not checked" if outcome.rights_not_checked else
                  f"; the worker lacks {missing} right(s)" if missing else "; the worker holds its rights")
    print(f"dpstream topics: {head} ({where}); {serious} would break the worker or lose state{rights}",
          file=sys.stderr)


def _acls_apply(args, fixes) -> str:
    """The ``dpstream acls --apply`` line for this deployment's worker."""
    given = [("--bootstrap-server", fixes.bootstrap), ("--command-config", fixes.command_config),
             ("--prefix", args.prefix or None), ("--app-id", args.app_id),
             *(("--user", u) for u in args.user or ())]
    return "dpstream acls --apply --role worker" + "".join(
        f" {flag} {shlex.quote(value)}" for flag, value in given if value is not None)


def _worker_user(given: list[str] | None) -> dict[str, str]:
    users = {}
    for item in given or []:
        role, _, name = item.partition("=")
        if role != "worker" or not name:
            raise ValueError(f"--user {item!r}: expected worker=NAME (topics check looks at the worker's "
                             "rights only)")
        users[role] = name
    return users


async def _worker_rights(admin, prefix: str, app_id: str, users: dict[str, str]) -> tuple[list, str | None]:
    """The rights the worker needs and lacks, and why they were not checked (None: they were)."""
    from dpstream.streams.tools.acls import ALLOW, DENY, needed, plan, principals, uncovered
    from dpstream.streams.worker.faust_seam import describe_acls
    worker = principals(prefix, users)["worker"]
    wanted = needed([a for a in plan(prefix, app_id, users) if a.principal == worker])
    try:
        allowed = await describe_acls(admin, permission=ALLOW)
        denied = await describe_acls(admin, permission=DENY)
    except PermissionError as err:       # no authorizer, or not allowed to describe ACLs
        code = re.search(r"error (\d+)", str(err))          # faust_seam.describe_acls's message
        return [], WHY_NOT.get(int(code.group(1)) if code else None, str(err)[:200])
    return uncovered(wanted, allowed, denied), None
