"""The ``dpstream`` command line.

    dpstream demo                      the main job on the embedded runtime (no Kafka)
    dpstream run --models M --examples E --queries Q --out DIR [--state S.db]
    dpstream worker [--broker HOST:PORT]
    dpstream produce --topic T --file F.jsonl      dpstream consume --topic T
    dpstream models register F.json | list | show ID
    dpstream export --out DIR          dpstream replay [--dir DIR]
    dpstream audit-report --dir DIR --out REPORT [--internal]
    dpstream features --sample PUBLIC.jsonl        a feature declaration from a public sample
    dpstream schemas --out DIR

The secret key comes from $DPSTREAM_SECRET_KEY or the file named by
$DPSTREAM_SECRET_KEY_FILE, never from a flag (flags land in shell history and ps).
The broker is --broker, else the client config's bootstrap.servers, else
$DPSTREAM_KAFKA_BOOTSTRAP, else 127.0.0.1:9092; its security comes from the client config
(--client-config or $DPSTREAM_KAFKA_CONFIG: streams/kafka.py).

Every command fails with one line on stderr and a non-zero exit, never a traceback,
for what a user can get wrong (a missing file, an unreachable broker, a bad config).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path

from dpstream.mechanisms.errors import MissingKeyError
from dpstream.mechanisms.randomness import KeyedRandomness

from . import topics
from .kafka import DEFAULT_BOOTSTRAP, Kafka, client_errors, running


class Failed(Exception):
    """A user-facing failure: ``main`` prints ``dpstream <command>: <message>`` on stderr
    and exits with ``code``."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _key() -> KeyedRandomness:
    try:
        return KeyedRandomness.from_env()
    except MissingKeyError as err:
        raise Failed(str(err), 2) from None


def _kafka(args) -> Kafka:
    """The connection settings of a command (module docstring; streams/kafka.py)."""
    from .kafka import ClientConfigError
    try:
        return Kafka.from_settings(args.broker, getattr(args, "client_config", None))
    except ClientConfigError as err:
        raise Failed(str(err), 2) from None


def _broker_call(kafka: Kafka, coro, doing: str = "talk to"):
    """Run a coroutine that talks to the broker; a failure is one line that says what to
    fix: an unreachable broker, a refused login or certificate, or the missing right
    (principal, operation, resource) when an ACL is missing. ``doing``: what the command
    tried, as "<Operation> <resource>" (e.g. "Write topic examples")."""
    with client_errors() as logged:
        try:
            return asyncio.run(coro)
        except Exception as err:          # noqa: BLE001 - one line, never a traceback
            failure = kafka.explain(err, doing, tuple(logged.messages))
    raise Failed(failure)


def cmd_demo(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from .demo import run_demo
    rows = run_demo(args.fraud_events, args.queries, progress=not args.quiet)
    meta = rows.pop()
    table = Table(title="dpstream demo (embedded runtime)")
    table.add_column("")
    for r in rows:
        table.add_column(r["model"], justify="right")

    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4f}" if v < 10 else f"{v:,.1f}"
        return "-" if v is None else str(v)

    for col in dict.fromkeys(k for r in rows for k in r if k != "model"):
        table.add_row(col, *[fmt(r.get(col)) for r in rows])
    console = Console()
    console.print(table)
    for line in meta["_meaning"]:
        console.print(line)
    console.print("online mistakes and baselines are computed in-process from the labelled "
                  "examples; they are private statistics and are never published")
    console.print(f"noise key source: {meta['_key_source']}; rejected inputs: {meta['_rejected']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def _read_lines(path: str | None) -> list[bytes]:
    """The non-empty lines of a JSONL file (Failed, exit 2, if it cannot be read)."""
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            return [line.rstrip(b"\r\n") for line in fh if line.strip()]
    except OSError as err:
        raise Failed(f"cannot read {path}: {err.strerror}", 2) from None


def _read_models(path: str | None) -> list[bytes]:
    """Model configs from a JSON file (one object or a list, any layout) or JSONL."""
    if not path:
        return []
    try:
        text = Path(path).read_bytes()
    except OSError as err:
        raise Failed(f"cannot read {path}: {err.strerror}", 2) from None
    try:
        value = json.loads(text)
    except ValueError:
        return _read_lines(path)
    return [json.dumps(v).encode() for v in (value if isinstance(value, list) else [value])]


def cmd_run(args) -> int:
    from .embedded import EmbeddedRuntime, SqliteState
    items = [(topics.MODELS, r) for r in _read_models(args.models)]
    items += [(topics.EXAMPLES, r) for r in _read_lines(args.examples)]
    items += [(topics.QUERIES, r) for r in _read_lines(args.queries)]
    rng = _key()
    state = SqliteState(args.state) if args.state else None
    rt = EmbeddedRuntime(rng, state)
    progress = Progress("dpstream run", len(items), quiet=args.quiet)
    asyncio.run(rt.feed_all(items, progress.advance))
    progress.done()
    if state is not None:
        state.commit()
    out = Path(args.out)
    write_export(out, rt.log, rt.outputs)
    print(f"dpstream run: {len(items)} inputs -> "
          + ", ".join(f"{len(rt.outputs[t])} {t}" for t in topics.OUTPUTS) + f" in {out}")
    refused = [r for r in rt.outputs[topics.REJECTED] if r["source"].startswith(topics.MODELS + ":")]
    for r in refused:
        print(f"dpstream run: registration at {r['source']} refused: {r['reason']}", file=sys.stderr)
    if items and len(rt.outputs[topics.REJECTED]) == len(items):
        print("dpstream run: every input was rejected (see rejected.jsonl)", file=sys.stderr)
        return 1
    return 1 if refused else 0


class Progress:
    """A progress bar on a terminal; a line every few seconds when output is piped."""

    EVERY = 5.0

    def __init__(self, label: str, total: int, *, quiet: bool = False):
        import time
        self.label, self.total, self.done_n, self.quiet = label, total, 0, quiet
        self.t0 = self.last = time.monotonic()
        self.bar = None
        if not quiet and sys.stderr.isatty() and total > 5_000:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar,
                                       TextColumn, TimeRemainingColumn)
            self.bar = Bar(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                           transient=True)
            self.bar.start()
            self.task = self.bar.add_task(label, total=total)

    def advance(self, n: int = 1) -> None:
        import time
        self.done_n += n
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done_n)
            return
        now = time.monotonic()
        if not self.quiet and self.total > 5_000 and now - self.last >= self.EVERY:
            self.last = now
            rate = self.done_n / max(now - self.t0, 1e-9)
            print(f"{self.label}: {self.done_n:,}/{self.total:,} ({rate:,.0f}/s)", file=sys.stderr,
                  flush=True)

    def done(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _owner_only(path: Path):
    """Open ``path`` for writing with mode 0600 (also when it already existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w")


def owner_only_dir(out: Path) -> Path:
    """``out`` created (or tightened) to mode 0700: readable by its owner only."""
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(out, 0o700)
    return out


def write_export(out: Path, log: list[dict], outputs: dict) -> None:
    """The layout `dpstream export` and `dpstream run` write and `dpstream replay --dir` reads.
    ``model-events.jsonl`` holds raw features and labels: the directory is created 0700
    and every file 0600 (owner only)."""
    owner_only_dir(out)
    with _owner_only(out / f"{topics.MODEL_EVENTS}.jsonl") as fh:
        for rec in log:
            fh.write(json.dumps(rec) + "\n")
    for topic in topics.OUTPUTS:
        with _owner_only(out / f"{topic}.jsonl") as fh:
            for value in outputs.get(topic, []):
                fh.write(json.dumps(value) + "\n")


class NothingToAudit(Exception):
    """An audit was asked of an export that holds no model events."""


def read_export(src: Path) -> tuple[list[dict], dict]:
    """The log and outputs of an export directory; :class:`NothingToAudit` when it is
    missing or holds no model event (an audit of nothing must not say OK)."""
    if not (src / f"{topics.MODEL_EVENTS}.jsonl").is_file():
        raise NothingToAudit(f"{src} is not an export directory (no {topics.MODEL_EVENTS}.jsonl)")

    def load(name):
        path = src / f"{name}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
            if path.exists() else []
    log = load(topics.MODEL_EVENTS)
    if not log:
        raise NothingToAudit(f"{src}/{topics.MODEL_EVENTS}.jsonl holds no model events")
    return log, {t: load(t) for t in topics.OUTPUTS}


async def _export_kafka(kafka: Kafka, prefix: str, timeout: float) -> tuple[list[dict], dict]:
    log = [{"partition": r.partition, "offset": r.offset, "value": json.loads(r.value)}
           for r in await read_topic(kafka, prefix + topics.MODEL_EVENTS, timeout=timeout)]
    outputs = {t: [json.loads(r.value) for r in await read_topic(kafka, prefix + t, timeout=timeout)]
               for t in topics.OUTPUTS}
    return log, outputs


def cmd_export(args) -> int:
    kafka = _kafka(args)
    log, outputs = _broker_call(kafka, _export_kafka(kafka, args.prefix, args.timeout),
                                f"Read topic {args.prefix}{topics.MODEL_EVENTS} and the output topics")
    write_export(Path(args.out), log, outputs)
    print(f"dpstream export: {len(log)} model events, "
          + ", ".join(f"{len(v)} {k}" for k, v in outputs.items()) + f" -> {args.out}")
    return 0


def cmd_replay(args) -> int:
    from .replay import WrongKeyError, replay, verify_public
    try:
        if args.dir:
            log, outputs = read_export(Path(args.dir))
        else:
            kafka = _kafka(args)
            log, outputs = _broker_call(kafka, _export_kafka(kafka, args.prefix, args.timeout),
                                        f"Read topic {args.prefix}{topics.MODEL_EVENTS} and the output topics")
            if not log:
                raise NothingToAudit(f"no model events on {args.prefix}{topics.MODEL_EVENTS} at "
                                     f"{kafka.bootstrap}")
    except NothingToAudit as err:
        raise Failed(f"{err}: nothing verified", 2) from None
    if args.no_key:
        problems = verify_public(outputs)
        print("\n".join(problems) if problems else
              f"OK: {len(outputs['ledger'])} ledger entries and {len(outputs['predictions'])} "
              "predictions are consistent (no key: releases themselves not recomputed)")
        return 1 if problems else 0
    models = set(args.model) if args.model else None
    rng = _key()
    progress = Progress("replay", len(log))
    try:
        report = asyncio.run(replay(rng, log, outputs, models, progress.advance))
    except WrongKeyError as err:
        raise Failed(str(err), 2) from None
    finally:
        progress.done()
    print(report.summary())
    return 0 if report.ok else 1


def cmd_audit_report(args) -> int:
    from .replay import replay
    from .report import build_report
    if args.internal and args.no_key:
        raise Failed("--internal recomputes mistakes with the key; drop --no-key", 2)
    try:
        log, outputs = read_export(Path(args.dir))
    except NothingToAudit as err:
        raise Failed(f"{err}: no report written", 2) from None
    summary, mistakes = None, ({} if args.internal else None)
    rng = None
    if not args.no_key:
        try:
            rng = KeyedRandomness.from_env()
        except MissingKeyError:
            if args.internal:
                raise Failed("--internal needs the key ($DPSTREAM_SECRET_KEY or "
                             "$DPSTREAM_SECRET_KEY_FILE)", 2) from None
            print("dpstream audit-report: no key configured: writing the keyless report "
                  "(releases marked not verified)", file=sys.stderr)
    if rng is not None:
        summary = asyncio.run(replay(rng, log, outputs, mistakes=mistakes)).summary()
    out = owner_only_dir(Path(args.out)) if args.internal else Path(args.out)
    path = build_report(log, outputs, out, summary, mistakes, private=args.internal)
    form = "INTERNAL (contains information about the private examples)" if args.internal else "public"
    print(f"dpstream audit-report: {path} ({form})")
    return 0


HELPER_START_TIMEOUT = 60.0     # seconds the worker waits for its noise helper at start


def cmd_worker(args) -> int:
    import faust

    from dpstream.mechanisms.accounting import preload
    from dpstream.mechanisms.continual import draw_ahead_in_a_process, start_helper

    from .app import WorkerApp
    from .faust_seam import contract
    from .observe import quiet_startup_logs
    from .topics import ensure_topics
    from .tuning import hold_full_collections, shorten_thread_switches
    rng = _key()
    problems = contract()
    if problems:
        raise Failed("the installed faust / mode / aiokafka lack what the worker relies on "
                     f"(streams/faust_seam.py): {'; '.join(problems)}")
    preload()                             # not on the loop at the first registration
    kafka = _kafka(args)
    created = _broker_call(kafka, ensure_topics(kafka, prefix=args.prefix, partitions=args.partitions),
                           "Describe and Create the topics" + (f" {args.prefix}*" if args.prefix else ""))
    if created:
        print(f"dpstream worker: created {len(created)} topic(s) with {args.partitions} partitions",
              file=sys.stderr)

    class Worker(faust.Worker):
        def on_setup_root_logger(self, logger, level) -> None:
            if not self.stdout.isatty():
                self.spinner = None           # no terminal escape codes in a log file
            super().on_setup_root_logger(logger, level)
            quiet_startup_logs(logger, level)

        async def on_startup_finished(self) -> None:
            await super().on_startup_finished()
            hold_full_collections()
            shorten_thread_switches()
            draw_ahead_in_a_process()
            try:                              # its start-up now, not mid-stream
                await asyncio.wait_for(asyncio.wrap_future(start_helper()), HELPER_START_TIMEOUT)
            except Exception as err:          # noqa: BLE001 - blocks are then drawn on demand
                logging.getLogger("dpstream").warning(
                    "the noise helper did not start (%s); noise is drawn on demand", type(err).__name__)
            logging.getLogger("dpstream").info(
                "dpstream worker ready: broker %s, topic prefix %r, %d partitions, key fingerprint %s%s",
                kafka.bootstrap, args.prefix, args.partitions, rng.fingerprint(),
                f", status on :{args.web_port}/status/" if args.web_port else "")

    data_dir = Path(args.data_dir)
    if not data_dir.exists():
        data_dir.mkdir(parents=True, mode=0o700)    # faust's local table files: the worker's only
    elif data_dir.stat().st_mode & 0o077:
        print(f"dpstream worker: warning: {data_dir} is open to other users (chmod 700 it: "
              "the worker keeps table files there)", file=sys.stderr)
    worker_app = WorkerApp(kafka=kafka, rng=rng, partitions=args.partitions,
                           app_id=args.app_id or args.prefix + "dpstream",
                           data_dir=args.data_dir, web_port=args.web_port, prefix=args.prefix,
                           latency_metrics=args.latency_metrics, consumer_thread=args.consumer_thread)
    worker = Worker(worker_app.app, loglevel=args.loglevel, quiet=True)
    worker.execute_from_commandline()
    return 0


async def _produce(kafka: Kafka, topic: str, lines, sent: list) -> None:
    async with running(kafka.producer(acks="all", enable_idempotence=True)) as producer:
        for line in lines:
            try:
                key = json.loads(line).get("model_id")
            except (ValueError, AttributeError):
                key = None
            await producer.send(topic, key=key.encode() if isinstance(key, str) else None, value=line)
            sent[0] += 1
        await producer.flush()


def check_record(topic: str, line: bytes) -> str | None:
    """Why a record would be dead-lettered for its form alone (None when it would not):
    the checks that need no registered model, made locally before sending."""
    from pydantic import ValidationError

    from dpstream.agents.sequencer import reason_of
    from dpstream.schemas import LabeledExample, ModelConfig, Query, limits
    from dpstream.schemas.config import config_error_text
    cls = {topics.MODELS: ModelConfig, topics.EXAMPLES: LabeledExample, topics.QUERIES: Query}[topic]
    try:
        raw = limits.decode(line)            # the worker's decoder: the same structural limits
    except limits.LimitError as err:
        return f"{err} {err.detail}".strip()
    if not isinstance(raw, dict):
        return "not a JSON object"
    kind = raw.get("type")
    expected = {topics.MODELS: "model", topics.EXAMPLES: "example", topics.QUERIES: "query"}[topic]
    if kind is not None and kind != expected:
        return f"a record of type {kind!r} on the {topic} topic (it takes {expected!r} records)"
    try:
        cls.model_validate({"type": expected, **raw})      # as the worker: a given type stays
    except ValidationError as err:
        return config_error_text(err, raw) if cls is ModelConfig else reason_of(err)
    return None


def cmd_produce(args) -> int:
    if args.topic not in topics.INPUTS:
        raise Failed(f"--topic must be one of {', '.join(topics.INPUTS)} (the worker writes "
                     "every other topic)", 2)
    lines = _read_lines(args.file)
    if not args.no_check:
        for i, line in enumerate(lines, 1):
            problem = check_record(args.topic, line)
            if problem:
                raise Failed(f"{args.file} line {i} would be dead-lettered on {args.topic}: "
                             f"{problem}; nothing sent (--no-check sends anyway; the worker's "
                             f"verdicts are on the {topics.REJECTED} topic)")
    kafka = _kafka(args)
    sent = [0]
    try:
        _broker_call(kafka, _produce(kafka, args.prefix + args.topic, lines, sent),
                     f"Write topic {args.prefix}{args.topic}")
    except Failed as err:
        raise Failed(f"{err} after {sent[0]} of {len(lines)} records were sent") from None
    print(f"dpstream produce: {sent[0]} records -> {args.prefix}{args.topic} (dead letters, "
          f"if any, appear on {args.prefix}{topics.REJECTED})", file=sys.stderr)
    return 0


async def read_topic(kafka: Kafka, topic: str, *, timeout: float = 5.0, limit: int | None = None):
    """Every record of ``topic`` from the beginning until ``timeout`` s without news."""
    out = []
    async with running(kafka.consumer(topic, auto_offset_reset="earliest", enable_auto_commit=False,
                                      group_id=None)) as consumer:
        while limit is None or len(out) < limit:
            batch = await consumer.getmany(timeout_ms=int(timeout * 1000))
            if not batch:
                break
            for tp, records in sorted(batch.items(), key=lambda kv: kv[0].partition):
                out.extend(records)
    return out[:limit] if limit else out


def cmd_consume(args) -> int:
    kafka = _kafka(args)
    records = _broker_call(kafka, read_topic(kafka, args.prefix + args.topic, timeout=args.timeout,
                                             limit=args.max), f"Read topic {args.prefix}{args.topic}")
    for r in records:
        sys.stdout.write(r.value.decode() + "\n")
    return 0


def cmd_models(args) -> int:
    if args.action == "register":
        return _register(args)
    if args.action == "show" and not args.target:
        raise Failed("name the model id", 2)
    # Configs come from the `models` topic (registrations only, never the model-events log,
    # which holds raw features); the first valid registration of an id is the one in force.
    from pydantic import ValidationError

    from dpstream.schemas import ModelConfig
    kafka = _kafka(args)
    models = {}
    for r in _broker_call(kafka, read_topic(kafka, args.prefix + topics.MODELS, timeout=args.timeout),
                          f"Read topic {args.prefix}{topics.MODELS}"):
        try:
            cfg = ModelConfig.model_validate_json(r.value)
        except (ValidationError, ValueError):
            continue
        models.setdefault(cfg.model_id, cfg)
    spent = {}
    for r in _broker_call(kafka, read_topic(kafka, args.prefix + topics.LEDGER, timeout=args.timeout),
                          f"Read topic {args.prefix}{topics.LEDGER}"):
        e = json.loads(r.value)
        spent[e["model_id"]] = e
    if args.action == "show" and args.target not in models:
        raise Failed(f"no registration for that id on {args.prefix}{topics.MODELS}")
    for mid, cfg in sorted(models.items()):
        if args.action == "show" and mid != args.target:
            continue
        e = spent.get(mid)
        used = (f"eps {e['spent_epsilon']:.6g} of {cfg.budget.epsilon:g} (epoch {e['epoch']})" if e
                else f"eps 0 of {cfg.budget.epsilon:g} (nothing charged yet)")
        print(f"{mid:24s} {cfg.kind:16s} d={cfg.dimension:<8d} {used}")
    return 0


def parse_registrations(path: str) -> list:
    """The model configs of a file (one JSON object, a list, or JSONL), each validated as
    the worker will: schema, then feasibility (``Handler.config_problem``). Failed with
    what to fix (the line and column of a JSON error; the field, value and allowed range
    of a schema error) on the first that fails."""
    from pydantic import ValidationError

    from dpstream.agents.kinds import kind
    from dpstream.schemas import ModelConfig
    from dpstream.schemas.config import config_error_text
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise Failed(f"cannot read {path}: {err.strerror}", 2) from None
    try:
        docs = [(0, json.loads(text))]
    except ValueError as whole:
        docs = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                docs.append((i, json.loads(line)))
            except ValueError as err:
                where = f"line {whole.lineno}, column {whole.colno}" if i == 1 else f"line {i}"
                raise Failed(f"{path}: not JSON at {where}: {getattr(err, 'msg', err)}") from None
    configs = []
    for line, doc in docs:
        for raw in doc if isinstance(doc, list) else [doc]:
            at = f"{path}" + (f" line {line}" if line else "")
            try:
                config = ModelConfig.model_validate(raw)
            except ValidationError as err:
                raise Failed(f"{at}: {config_error_text(err, raw)}") from None
            problem = kind(config.kind).config_problem(config)
            if problem:
                raise Failed(f"{at}: infeasible model config for {config.model_id}: {problem}")
            configs.append(config)
    return configs


def _register(args) -> int:
    """Validate registrations locally (schema and feasibility, as the worker will) and
    send them only when every one would be accepted."""
    if not args.target:
        raise Failed("name a model config file (JSON, a list, or JSONL)", 2)
    configs = parse_registrations(args.target)
    kafka = _kafka(args)
    lines = [json.dumps(c.model_dump(mode="json")).encode() for c in configs]
    _broker_call(kafka, _produce(kafka, args.prefix + topics.MODELS, lines, [0]),
                 f"Write topic {args.prefix}{topics.MODELS}")
    for config in configs:
        print(f"dpstream models: registration of {config.model_id} ({config.kind}) sent; "
              f"refusals appear on {args.prefix}{topics.REJECTED}")
    return 0


def cmd_features(args) -> int:
    """Print a feature declaration suggested from a *public* sample (learners/features.py
    ``suggest_fields``), ready for a registration's "features"."""
    from dpstream.learners.features import suggest_fields
    records = []
    for i, line in enumerate(_read_lines(args.sample), 1):
        try:
            value = json.loads(line)
        except ValueError as err:
            raise Failed(f"{args.sample} line {i}: not JSON ({err})") from None
        if isinstance(value, dict):
            records.append(value["features"] if isinstance(value.get("features"), dict) else value)
    if not records:
        raise Failed(f"{args.sample} holds no JSON objects", 2)
    fields = suggest_fields(records, bins=args.bins, binning=args.binning)
    print(json.dumps([f.model_dump(mode="json", exclude_none=True) for f in fields], indent=1))
    print(f"dpstream features: {len(fields)} fields from {len(records)} records of {args.sample}; "
          "the declaration is public: make it from data you may publish", file=sys.stderr)
    return 0


def cmd_acls(args) -> int:
    """Print (and with --apply, create) the ACLs of every principal (streams/acls.py)."""
    from .acls import CLUSTER, ROLES, plan
    from .faust_seam import create_acls, delete_acls
    users = {}
    for given in args.user or []:
        role, _, name = given.partition("=")
        if role not in ROLES or not name:
            raise Failed(f"--user {given!r}: expected ROLE=NAME with ROLE one of {', '.join(ROLES)}", 2)
        users[role] = name
    try:
        acls = plan(args.prefix, args.app_id, users)
    except ValueError as err:
        raise Failed(str(err), 2) from None
    if args.role:
        acls = [a for a in acls if a.principal == f"User:{users.get(args.role, args.role)}"]
    if args.remove:          # cluster-wide rights (IdempotentWrite) are shared by every prefix
        shared = [a for a in acls if a.resource_type == CLUSTER]
        acls = [a for a in acls if a.resource_type != CLUSTER]
        if shared:
            print(f"dpstream acls: keeping {len(shared)} cluster-wide ACLs that other prefixes share",
                  file=sys.stderr)
    for acl in acls:
        print(acl.describe())
    if not (args.apply or args.remove):
        return 0
    kafka = _kafka(args)

    async def change():
        async with running(kafka.admin(request_timeout_ms=10_000)) as admin:
            return await (delete_acls if args.remove else create_acls)(admin, acls)
    errors = _broker_call(kafka, change(), "Alter the cluster's ACLs")
    if errors:
        raise Failed(f"{len(errors)} of {len(acls)} ACL changes refused, first: {errors[0]}")
    print(f"dpstream acls: {len(acls)} ACLs {'removed' if args.remove else 'created'} for topic "
          f"prefix {args.prefix!r}", file=sys.stderr)
    return 0


def cmd_schemas(args) -> int:
    from dpstream.schemas import json_schemas
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, schema in json_schemas().items():
        (out / f"{name}.json").write_text(json.dumps(schema, indent=2))
    print(f"dpstream schemas: {len(json_schemas())} JSON Schemas in {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="dpstream", description="Differentially private online learning and private "
        "prediction over Kafka streams. The secret key comes from $DPSTREAM_SECRET_KEY or the "
        "file named by $DPSTREAM_SECRET_KEY_FILE (64+ hex digits), never from a flag.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    p = sub.add_parser("demo", help="the main job on the embedded runtime (no Kafka)")
    p.add_argument("--fraud-events", type=int, default=20_000, help="default: %(default)s")
    p.add_argument("--queries", type=int, default=5_000, help="risk-score queries (default: %(default)s)")
    p.add_argument("--json", help="also write the summary as JSON to this file")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("run", help="the embedded runtime over files (no Kafka)")
    p.add_argument("--models", help="model configs: a JSON file (object or list) or JSONL")
    p.add_argument("--examples", help="labelled examples, JSONL")
    p.add_argument("--queries", help="queries, JSONL")
    p.add_argument("--out", required=True, help="export directory written (0700, files 0600)")
    p.add_argument("--state", help="SQLite file for state that survives restarts")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(fn=cmd_run)

    def broker(parser):
        parser.add_argument("--broker", help="bootstrap servers (default: the client config's bootstrap.servers, "
                            f"else $DPSTREAM_KAFKA_BOOTSTRAP, else {DEFAULT_BOOTSTRAP})")
        parser.add_argument("--client-config", help="a Kafka client properties file (security.protocol, "
                            "sasl.*, ssl.*; default: $DPSTREAM_KAFKA_CONFIG)")
        parser.add_argument("--prefix", default="", help="prefix of every topic name")

    p = sub.add_parser("worker", help="run a faust worker against a Kafka broker")
    broker(p)
    p.add_argument("--partitions", type=int, default=4,
                   help="partitions of topics it creates; fixes how many workers can share "
                        "the load (default: %(default)s)")
    p.add_argument("--app-id", help="faust app id / consumer group, also the prefix of its changelogs "
                   "(default: the topic prefix + 'dpstream')")
    p.add_argument("--data-dir", default="/tmp/dpstream-worker", help="default: %(default)s")
    p.add_argument("--web-port", type=int, help="serve /status/ and /metrics/ on this port")
    p.add_argument("--loglevel", default="info", help="default: %(default)s")
    p.add_argument("--consumer-thread", action="store_true",
                   help="run faust's Kafka consumer in its own thread (faust's default) instead "
                        "of on the worker's event loop (streams/faust_seam.py); a fallback")
    p.add_argument("--latency-metrics", action="store_true",
                   help="export a coarse batch-latency histogram (a timing side channel; off by default)")
    p.set_defaults(fn=cmd_worker)
    for name, fn in (("produce", cmd_produce), ("consume", cmd_consume)):
        p = sub.add_parser(name, help="send a JSONL file to an input topic" if name == "produce"
                           else "print a topic's records from the start")
        broker(p)
        p.add_argument("--topic", required=True)
        if name == "produce":
            p.add_argument("--file", required=True, help="JSONL, one record per line")
            p.add_argument("--no-check", action="store_true",
                           help="send without checking each record's form locally first")
        else:
            p.add_argument("--timeout", type=float, default=5.0,
                           help="stop after this many seconds without a new record (default: %(default)s)")
            p.add_argument("--max", type=int, help="stop after this many records")
        p.set_defaults(fn=fn)
    p = sub.add_parser("models", help="register, list or show models")
    p.add_argument("action", choices=["register", "list", "show"])
    p.add_argument("target", nargs="?")
    broker(p)
    p.add_argument("--timeout", type=float, default=3.0)
    p.set_defaults(fn=cmd_models)
    p = sub.add_parser("export", help="write the log and output topics to JSONL files")
    broker(p)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("replay", help="recompute every release with the key and compare")
    p.add_argument("--dir", help="an export directory (default: read the topics from Kafka)")
    broker(p)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--model", action="append", help="only these model ids (repeatable)")
    p.add_argument("--no-key", action="store_true", help="verify only the public record")
    p.set_defaults(fn=cmd_replay)
    p = sub.add_parser("audit-report", help="HTML report and PNG figures per model")
    p.add_argument("--dir", required=True, help="an export directory")
    p.add_argument("--out", required=True)
    p.add_argument("--no-key", action="store_true", help="skip the keyed replay summary")
    p.add_argument("--internal", action="store_true",
                   help="add exact online mistakes (private statistics; for the data owner only)")
    p.set_defaults(fn=cmd_audit_report)
    p = sub.add_parser("acls", help="print or apply the ACLs of every principal (least privilege)")
    broker(p)
    p.add_argument("--app-id", help="the worker's app id (default: the prefix + 'dpstream')")
    p.add_argument("--user", action="append", metavar="ROLE=NAME",
                   help="the user name of a role (worker, producer, querier, consumer, auditor)")
    p.add_argument("--role", choices=["worker", "producer", "querier", "consumer", "auditor"],
                   help="only this role's ACLs")
    p.add_argument("--apply", action="store_true", help="create them through the admin API")
    p.add_argument("--remove", action="store_true", help="delete them through the admin API")
    p.add_argument("--print", dest="print_only", action="store_true", help="only print them (the default)")
    p.set_defaults(fn=cmd_acls)
    p = sub.add_parser("features", help="suggest a feature declaration from a public sample")
    p.add_argument("--sample", required=True, help="JSONL of raw records (or of examples with 'features')")
    p.add_argument("--bins", type=int, default=8, help="bins per number (default: %(default)s)")
    p.add_argument("--binning", choices=["equal_width", "quantile"], default="equal_width")
    p.set_defaults(fn=cmd_features)
    p = sub.add_parser("schemas", help="write JSON Schemas of every event")
    p.add_argument("--out", required=True, help="directory to write them to")
    p.set_defaults(fn=cmd_schemas)
    args = ap.parse_args(argv)
    if args.cmd != "worker":       # the client library's own error lines: the command says it once
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    try:
        return args.fn(args)
    except Failed as err:
        print(f"dpstream {args.cmd}: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
