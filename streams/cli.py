"""The ``dpstream`` command line.

    dpstream demo                      the main job on the embedded runtime (no Kafka)
    dpstream run --models M --examples E --queries Q --out DIR [--state S.db]
    dpstream worker [--broker HOST:PORT]
    dpstream produce --topic T --file F.jsonl      dpstream consume --topic T
    dpstream models register F.json | list | show ID
    dpstream export --out DIR          dpstream replay [--dir DIR]
    dpstream schemas --out DIR

The secret key comes from $DPSTREAM_SECRET_KEY or the file named by
$DPSTREAM_SECRET_KEY_FILE, never from a flag (flags land in shell history and ps).
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

DEFAULT_BROKER = "127.0.0.1:9092"


def _key() -> KeyedRandomness:
    try:
        return KeyedRandomness.from_env()
    except MissingKeyError as err:
        sys.exit(f"dpstream: {err}")


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


def _read_jsonl(path: str | None):
    if not path:
        return []
    with open(path, "rb") as fh:
        return [line.rstrip(b"\n") for line in fh if line.strip()]


def cmd_run(args) -> int:
    from .embedded import EmbeddedRuntime, SqliteState
    rng = _key()
    state = SqliteState(args.state) if args.state else None
    rt = EmbeddedRuntime(rng, state)
    items = [(topics.MODELS, r) for r in _read_models(args.models)]
    items += [(topics.EXAMPLES, r) for r in _read_jsonl(args.examples)]
    items += [(topics.QUERIES, r) for r in _read_jsonl(args.queries)]
    asyncio.run(rt.feed_all(items))
    if state is not None:
        state.commit()
    out = Path(args.out)
    write_export(out, rt.log, rt.outputs)
    print(f"dpstream run: {len(items)} inputs -> "
          + ", ".join(f"{len(rt.outputs[t])} {t}" for t in topics.OUTPUTS) + f" in {out}")
    if items and len(rt.outputs[topics.REJECTED]) == len(items):
        print("dpstream run: every input was rejected (see rejected.jsonl)", file=sys.stderr)
        return 1
    return 0


def _read_models(path: str | None) -> list[bytes]:
    """Model configs from a JSON file (one object or a list, any layout) or JSONL."""
    if not path:
        return []
    text = Path(path).read_bytes()
    try:
        value = json.loads(text)
    except ValueError:
        return _read_jsonl(path)
    return [json.dumps(v).encode() for v in (value if isinstance(value, list) else [value])]


def _owner_only(path: Path):
    """Open ``path`` for writing with mode 0600 (also when it already existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w")


def write_export(out: Path, log: list[dict], outputs: dict) -> None:
    """The layout `dpstream export` and `dpstream run` write and `dpstream replay --dir` reads.
    ``model-events.jsonl`` holds raw features and labels: the directory is created 0700
    and every file 0600 (owner only)."""
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
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


async def _export_kafka(broker: str, prefix: str, timeout: float) -> tuple[list[dict], dict]:
    log = [{"partition": r.partition, "offset": r.offset, "value": json.loads(r.value)}
           for r in await read_topic(broker, prefix + topics.MODEL_EVENTS, timeout=timeout)]
    outputs = {t: [json.loads(r.value) for r in await read_topic(broker, prefix + t, timeout=timeout)]
               for t in topics.OUTPUTS}
    return log, outputs


def cmd_export(args) -> int:
    log, outputs = asyncio.run(_export_kafka(args.broker, args.prefix, args.timeout))
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
            log, outputs = asyncio.run(_export_kafka(args.broker, args.prefix, args.timeout))
            if not log:
                raise NothingToAudit(f"no model events on {args.prefix}{topics.MODEL_EVENTS} at {args.broker}")
    except NothingToAudit as err:
        print(f"dpstream replay: {err}: nothing verified", file=sys.stderr)
        return 2
    if args.no_key:
        problems = verify_public(outputs)
        print("\n".join(problems) if problems else
              f"OK: {len(outputs['ledger'])} ledger entries and {len(outputs['predictions'])} "
              "predictions are consistent (no key: releases themselves not recomputed)")
        return 1 if problems else 0
    models = set(args.model) if args.model else None
    try:
        if len(log) > 10_000 and sys.stderr.isatty():
            import time

            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeRemainingColumn)
            with Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[rate]}"), TimeRemainingColumn()) as bar:
                task = bar.add_task("replay", total=len(log), rate="")
                seen, t0 = [0], time.perf_counter()

                def tick():
                    seen[0] += 1
                    if seen[0] % 1000 == 0 or seen[0] == len(log):
                        rate = seen[0] / max(time.perf_counter() - t0, 1e-9)
                        bar.update(task, completed=seen[0], rate=f"{rate:,.0f} events/s")

                report = asyncio.run(replay(_key(), log, outputs, models, tick))
        else:
            report = asyncio.run(replay(_key(), log, outputs, models))
    except WrongKeyError as err:
        print(f"dpstream replay: {err}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.ok else 1


def cmd_audit_report(args) -> int:
    from .report import build_report
    if args.internal and args.no_key:
        sys.exit("dpstream audit-report: --internal recomputes mistakes with the key; drop --no-key")
    try:
        log, outputs = read_export(Path(args.dir))
    except NothingToAudit as err:
        print(f"dpstream audit-report: {err}: no report written", file=sys.stderr)
        return 2
    summary, mistakes = None, ({} if args.internal else None)
    if not args.no_key:
        from .replay import replay
        summary = asyncio.run(replay(_key(), log, outputs, mistakes=mistakes)).summary()
    path = build_report(log, outputs, Path(args.out), summary, mistakes)
    form = "INTERNAL (contains information about the private examples)" if args.internal else "public"
    print(f"dpstream audit-report: {path} ({form})")
    return 0


def cmd_worker(args) -> int:
    import faust

    from dpstream.mechanisms.continual import draw_ahead_in_a_process

    from .app import make_app
    from .topics import ensure_topics
    from .tuning import hold_full_collections, shorten_thread_switches
    rng = _key()
    try:
        created = asyncio.run(ensure_topics(args.broker, prefix=args.prefix, partitions=args.partitions))
    except Exception as err:              # noqa: BLE001 - report, do not trace back
        print(f"dpstream worker: cannot reach the Kafka broker at {args.broker}: "
              f"{type(err).__name__}", file=sys.stderr)
        return 1
    if created:
        print(f"dpstream worker: created {len(created)} topic(s) with {args.partitions} partitions",
              file=sys.stderr)

    class Worker(faust.Worker):
        async def on_startup_finished(self) -> None:
            await super().on_startup_finished()
            hold_full_collections()
            shorten_thread_switches()
            draw_ahead_in_a_process()
            print(f"dpstream worker ready: broker {args.broker}, topic prefix {args.prefix!r}, "
                  f"{args.partitions} partitions, key fingerprint {rng.fingerprint()}"
                  + (f", status on :{args.web_port}/status/" if args.web_port else ""),
                  file=sys.stderr, flush=True)

    app = make_app(broker=args.broker, rng=rng, partitions=args.partitions, app_id=args.app_id,
                   data_dir=args.data_dir, web_port=args.web_port, prefix=args.prefix,
                   latency_metrics=args.latency_metrics, bulk=not args.per_record,
                   consumer_thread=args.consumer_thread)
    worker = Worker(app, loglevel=args.loglevel, quiet=True)
    from .observe import RepeatFilter
    repeat = RepeatFilter()
    for name in ("aiokafka", "faust", "mode"):          # outages repeat the same lines
        logging.getLogger(name).addFilter(repeat)
    worker.execute_from_commandline()
    return 0


async def _produce(broker: str, topic: str, lines) -> int:
    from aiokafka import AIOKafkaProducer
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all", enable_idempotence=True)
    await producer.start()
    n = 0
    try:
        for line in lines:
            try:
                key = json.loads(line).get("model_id")
            except (ValueError, AttributeError):
                key = None
            await producer.send(topic, key=key.encode() if isinstance(key, str) else None, value=line)
            n += 1
        await producer.flush()
    finally:
        await producer.stop()
    return n


def cmd_produce(args) -> int:
    if args.topic not in topics.INPUTS:
        print(f"dpstream produce: --topic must be one of {', '.join(topics.INPUTS)} "
              "(the worker writes every other topic)", file=sys.stderr)
        return 2
    try:
        lines = _read_jsonl(args.file)
        n = asyncio.run(_produce(args.broker, args.prefix + args.topic, lines))
    except OSError as err:
        print(f"dpstream produce: cannot read {args.file}: {err.strerror}", file=sys.stderr)
        return 2
    except Exception as err:              # noqa: BLE001 - one line, not a traceback
        print(f"dpstream produce: stopped ({type(err).__name__}); records before it were sent",
              file=sys.stderr)
        return 1
    print(f"dpstream produce: {n} records -> {args.prefix}{args.topic}", file=sys.stderr)
    return 0


async def read_topic(broker: str, topic: str, *, timeout: float = 5.0, limit: int | None = None):
    """Every record of ``topic`` from the beginning until ``timeout`` s without news."""
    from aiokafka import AIOKafkaConsumer
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    out = []
    try:
        while limit is None or len(out) < limit:
            batch = await consumer.getmany(timeout_ms=int(timeout * 1000))
            if not batch:
                break
            for tp, records in sorted(batch.items(), key=lambda kv: kv[0].partition):
                out.extend(records)
    finally:
        await consumer.stop()
    return out[:limit] if limit else out


def cmd_consume(args) -> int:
    records = asyncio.run(read_topic(args.broker, args.prefix + args.topic, timeout=args.timeout,
                                     limit=args.max))
    for r in records:
        sys.stdout.write(r.value.decode() + "\n")
    return 0


def cmd_models(args) -> int:
    if args.action == "register":
        return _register(args)
    if args.action == "show" and not args.target:
        print("dpstream models show: name the model id", file=sys.stderr)
        return 2
    # Configs come from the `models` topic (registrations only, never the model-events log,
    # which holds raw features); the first valid registration of an id is the one in force.
    from pydantic import ValidationError

    from dpstream.schemas import ModelConfig
    models = {}
    for r in asyncio.run(read_topic(args.broker, args.prefix + topics.MODELS, timeout=args.timeout)):
        try:
            cfg = ModelConfig.model_validate_json(r.value)
        except (ValidationError, ValueError):
            continue
        models.setdefault(cfg.model_id, cfg.model_dump(mode="json"))
    spent = {}
    for r in asyncio.run(read_topic(args.broker, args.prefix + topics.LEDGER, timeout=args.timeout)):
        e = json.loads(r.value)
        spent[e["model_id"]] = e
    if args.action == "show" and args.target not in models:
        print(f"dpstream models show: no registration for that id on {args.prefix}{topics.MODELS}",
              file=sys.stderr)
        return 1
    for mid, cfg in sorted(models.items()):
        if args.action == "show" and mid != args.target:
            continue
        e = spent.get(mid)
        used = f"eps {e['spent_epsilon']:.6g} / {cfg['budget']['epsilon']:g} (epoch {e['epoch']})" if e \
            else "eps 0"
        print(f"{mid:24s} {cfg['params']['kind']:14s} d={cfg['dimension']:<8d} {used}")
    return 0


def _register(args) -> int:
    """Validate a registration locally (schema and feasibility, as the worker will) and
    send it only when it would be accepted."""
    from pydantic import ValidationError

    from dpstream.agents.handlers import check_feasible
    from dpstream.agents.sequencer import _reason
    from dpstream.schemas import ModelConfig
    if not args.target:
        print("dpstream models register: name a model config file (JSON)", file=sys.stderr)
        return 2
    try:
        config = ModelConfig.model_validate_json(Path(args.target).read_bytes())
    except OSError as err:
        print(f"dpstream models register: cannot read {args.target}: {err.strerror}", file=sys.stderr)
        return 2
    except ValidationError as err:
        print(f"dpstream models register: {_reason(err)}", file=sys.stderr)
        return 1
    problem = check_feasible(config)
    if problem:
        print(f"dpstream models register: {problem}", file=sys.stderr)
        return 1
    line = json.dumps(config.model_dump(mode="json")).encode()
    try:
        asyncio.run(_produce(args.broker, args.prefix + topics.MODELS, [line]))
    except Exception as err:              # noqa: BLE001
        print(f"dpstream models register: cannot reach the broker at {args.broker} "
              f"({type(err).__name__})", file=sys.stderr)
        return 1
    print(f"dpstream models: registration of {config.model_id} ({config.kind}) sent; "
          f"watch `dpstream consume --topic rejected` if the worker refuses it")
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
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("run", help="the embedded runtime over files (no Kafka)")
    p.add_argument("--models", help="model configs: a JSON file (object or list) or JSONL")
    p.add_argument("--examples", help="labelled examples, JSONL")
    p.add_argument("--queries", help="queries, JSONL")
    p.add_argument("--out", required=True, help="export directory written (0700, files 0600)")
    p.add_argument("--state", help="SQLite file for state that survives restarts")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("worker", help="run a faust worker against a Kafka broker")
    p.add_argument("--broker", default=DEFAULT_BROKER, help="default: %(default)s")
    p.add_argument("--partitions", type=int, default=4,
                   help="partitions of topics it creates; fixes how many workers can share "
                        "the load (default: %(default)s)")
    p.add_argument("--app-id", default="dpstream", help="faust app id / consumer group (default: %(default)s)")
    p.add_argument("--data-dir", default="/tmp/dpstream-worker", help="default: %(default)s")
    p.add_argument("--web-port", type=int, help="serve /status/ and /metrics/ on this port")
    p.add_argument("--loglevel", default="warning", help="default: %(default)s")
    p.add_argument("--prefix", default="", help="prefix of every topic name")
    p.add_argument("--consumer-thread", action="store_true",
                   help="run faust's Kafka consumer in its own thread (faust's default) instead "
                        "of on the worker's event loop (streams/inloop.py)")
    p.add_argument("--latency-metrics", action="store_true",
                   help="export a coarse batch-latency histogram (a timing side channel; off by default)")
    p.add_argument("--per-record", action="store_true",
                   help="consume through faust's per-record stream path instead of whole fetches "
                        "(streams/bulk.py; slower, kept for comparison)")
    p.set_defaults(fn=cmd_worker)
    for name, fn in (("produce", cmd_produce), ("consume", cmd_consume)):
        p = sub.add_parser(name, help="send a JSONL file to an input topic" if name == "produce"
                           else "print a topic's records from the start")
        p.add_argument("--broker", default=DEFAULT_BROKER, help="default: %(default)s")
        p.add_argument("--prefix", default="", help="prefix of every topic name")
        p.add_argument("--topic", required=True)
        if name == "produce":
            p.add_argument("--file", required=True, help="JSONL, one record per line")
        else:
            p.add_argument("--timeout", type=float, default=5.0,
                           help="stop after this many seconds without a new record (default: %(default)s)")
            p.add_argument("--max", type=int, help="stop after this many records")
        p.set_defaults(fn=fn)
    p = sub.add_parser("models", help="register, list or show models")
    p.add_argument("action", choices=["register", "list", "show"])
    p.add_argument("target", nargs="?")
    p.add_argument("--broker", default=DEFAULT_BROKER)
    p.add_argument("--prefix", default="", help="prefix of every topic name")
    p.add_argument("--timeout", type=float, default=3.0)
    p.set_defaults(fn=cmd_models)
    p = sub.add_parser("export", help="write the log and output topics to JSONL files")
    p.add_argument("--broker", default=DEFAULT_BROKER)
    p.add_argument("--prefix", default="")
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("replay", help="recompute every release with the key and compare")
    p.add_argument("--dir", help="an export directory (default: read the topics from Kafka)")
    p.add_argument("--broker", default=DEFAULT_BROKER)
    p.add_argument("--prefix", default="")
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
    p = sub.add_parser("schemas", help="write JSON Schemas of every event")
    p.add_argument("--out", default="schemas-json")
    p.set_defaults(fn=cmd_schemas)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
