"""The ``dpstream`` command line.

    dpstream demo                      the main job on the embedded runtime (no Kafka)
    dpstream run --models M --examples E --queries Q --out DIR [--state S.db]
    dpstream worker [--bootstrap-server HOST:PORT]
    dpstream produce --topic T --file F [--skip N]  dpstream consume --topic T [--from-beginning]
    dpstream models register F.json | list | show ID
    dpstream export --out DIR          dpstream replay [--dir DIR]
    dpstream audit-report --dir DIR --out REPORT [--internal]
    dpstream features --sample PUBLIC.jsonl        a feature declaration from a public sample
    dpstream schemas --out DIR

The secret key comes from $DPSTREAM_SECRET_KEY or the file named by
$DPSTREAM_SECRET_KEY_FILE, never from a flag (flags land in shell history and ps).
The broker is --bootstrap-server (or --broker), else the client config's
bootstrap.servers, else $DPSTREAM_KAFKA_BOOTSTRAP, else 127.0.0.1:9092; its security comes
from the client config (--command-config or --client-config, or $DPSTREAM_KAFKA_CONFIG:
streams/worker/kafka.py). Flags follow Kafka's console tools (``--bootstrap-server``,
``--command-config``, ``--max-messages``, ``--from-beginning``); the earlier names stay
as aliases. A file argument may be ``-`` for standard input.

Files (streams/tools/userfiles.py): ``produce`` and ``run`` read JSONL, CSV or Parquet, take
labels as -1/+1, 0/1 or true/false, and print the data owner's report
(streams/tools/owner_report.py) on stderr. Before sending, ``produce`` and ``models register``
read the registrations in force (streams/tools/topicread.py): records for a model that is not
registered, and a registration whose id is in force with another config, are refused.

Every command fails with one line on stderr and a non-zero exit, never a traceback,
for what a user can get wrong (a missing file, an unreachable broker, a bad config).
Exit codes: 0 done, 1 failed, 2 a usage or input error, 130 interrupted, 141 the reader
of its output left (``| head``).
"""
from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import math
import os
import sqlite3
import stat
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from dpstream.mechanisms.errors import MissingKeyError
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.worker import topics
from dpstream.streams.worker.kafka import DEFAULT_BOOTSTRAP, Kafka, client_errors, honour_cancel, running

from .progress import Progress


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
    """The connection settings of a command (module docstring; streams/worker/kafka.py)."""
    from dpstream.streams.worker.kafka import ClientConfigError
    try:
        kafka = Kafka.from_settings(args.broker, getattr(args, "client_config", None))
        kafka.check_files()              # a missing CA file: said now, not as an unreachable broker
    except ClientConfigError as err:
        raise Failed(str(err), 2) from None
    return kafka


async def _honouring_cancel(coro):
    """``coro``'s result, unless a Ctrl-C came that a client's close swallowed
    (``honour_cancel``): asyncio.run turns the CancelledError raised then into
    KeyboardInterrupt, as it does for a Ctrl-C that was not swallowed."""
    result = await coro
    honour_cancel()
    return result


def _broker_call(kafka: Kafka, coro, doing: str = "talk to", passing: tuple = ()):
    """Run a coroutine that talks to the broker; a failure is one line that says what to
    fix: an unreachable broker, a refused login or certificate, or the missing right
    (principal, operation, resource) when an ACL is missing. ``doing``: what the command
    tried, as "<Operation> <resource>" (e.g. "Write topic examples"). Exceptions of the
    types in ``passing`` reach the caller as they are."""
    with client_errors() as logged:
        try:
            return asyncio.run(_honouring_cancel(coro))
        except (BrokenPipeError, *passing):       # the reader left (``| head``): main() says 141
            raise
        except Exception as err:          # noqa: BLE001 - one line, never a traceback
            failure = kafka.explain(err, doing, tuple(logged.messages))
    raise Failed(failure)


def cmd_demo(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from .demo import demo_key, run_demo
    for flag, n in (("--fraud-events", args.fraud_events), ("--queries", args.queries)):
        if not 1 <= n <= DEMO_MAX:
            raise Failed(f"{flag} {str(n)[:40]}: a whole number from 1 to {DEMO_MAX:,}", 2)
    try:
        demo_key()
    except MissingKeyError as err:
        raise Failed(str(err), 2) from None
    summary = _private_file(args.json) if args.json else None    # refused now, not after the run
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
    console.print("non-private LR: logistic regression, online (SGD) beside the online learners, "
                  "trained once on every example beside the predictor")
    console.print("online mistakes and baselines are computed in-process from the labelled "
                  "examples; they are private statistics and are never published")
    console.print(f"noise key source: {meta['_key_source']}; rejected inputs: {meta['_rejected']}")
    if summary is not None:
        from dpstream.streams.tools.outdir import UnsafeOut
        try:
            with summary:
                summary.write(json.dumps(rows, indent=2).encode())
        except UnsafeOut as err:
            raise Failed(f"--json {err}", 1) from None
    return 0


DEMO_MAX = 10_000_000      # events of one demo stream (it holds them in memory)


def _private_file(path: str):
    """``--json``'s file, private (streams/tools/outdir.py ``private_file``); Failed, exit 2,
    in one line when it may not be written."""
    from dpstream.streams.tools.outdir import UnsafeOut, private_file
    try:
        return private_file(path)
    except UnsafeOut as err:
        raise Failed(f"--json {err.problem}: nothing written; choose another file", 2) from None


def _read_lines(path: str | None) -> list[bytes]:
    """The non-empty lines of a JSONL file (Failed, exit 2, if it cannot be read)."""
    if not path:
        return []
    from dpstream.streams.tools.userfiles import FileError, read_jsonl
    try:
        return [row.raw for row in read_jsonl(path)]
    except FileError as err:
        raise Failed(str(err), 2) from None


def _read_models(path: str | None) -> list[bytes]:
    """Model configs from a JSON file (one object or a list, any layout) or JSONL."""
    if not path:
        return []
    from dpstream.streams.tools.userfiles import FileError, read_bytes
    try:
        text = read_bytes(path)
    except FileError as err:
        raise Failed(str(err), 2) from None
    from dpstream.schemas.limits import MALFORMED, LimitError, decode
    try:
        value = decode(text, max_bytes=None)        # the records' own limits (docs/limits.md)
    except LimitError as err:
        if str(err) != MALFORMED:                  # too deep, too many members: one line, not a traceback
            raise Failed(f"{path}: {err}", 2) from None
        lines = []                                  # JSONL: each line checked as a record
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            lines.append(line)
            try:
                decode(line, max_bytes=None)
            except LimitError as line_err:
                if str(line_err) == MALFORMED:      # a config file that is not JSON: nothing is run
                    raise Failed(f"{_shown(path)}: not JSON at {_json_error_at(text, line, i)}; "
                                 "nothing run", 2) from None
                continue                            # over a limit: the runtime refuses it, as the worker would
            json.loads(line, object_pairs_hook=_unique_names(path))
        return lines
    json.loads(text, object_pairs_hook=_unique_names(path))     # within the limits: no deep recursion
    return [json.dumps(v).encode() for v in (value if isinstance(value, list) else [value])]


def _shown(path: str) -> str:
    return "standard input" if path == "-" else path


def _json_error_at(text: bytes, line: bytes, i: int) -> str:
    """Where line ``i`` of ``text`` stops being JSON, as ``models register`` says it: the
    whole document's line and column when the first line fails (one object over many
    lines), else the line's own column; and the parser's reason."""
    try:
        json.loads(text if i == 1 else line)
    except json.JSONDecodeError as err:
        line_no, col = (err.lineno, err.colno) if i == 1 else (i, err.colno)
        return f"line {line_no}, column {col}: {err.msg}"
    except ValueError:                       # bytes that are not UTF-8 (a reviewer's pass: a traceback)
        return f"line {i}: not UTF-8 text"
    return f"line {i}"


def _models_in(lines: list[bytes]) -> dict:
    """The valid registrations among ``lines``, the first of each id (for typing table
    cells and the data owner's report; the runtime still decides which it accepts)."""
    from pydantic import ValidationError

    from dpstream.schemas import ModelConfig
    configs = {}
    for line in lines:
        try:
            config = ModelConfig.model_validate_json(line)
        except (ValidationError, ValueError):
            continue
        configs.setdefault(config.model_id, config)
    return configs


def _say_notes(command: str, configs) -> None:
    """Each registration's notes (``registration_notes``: what it will do otherwise than it
    reads), on stderr."""
    from dpstream.agents.kinds import kind
    for config in configs:
        for note in kind(config.kind).registration_notes(config):
            print(f"dpstream {command}: model {config.model_id}: {note}", file=sys.stderr)


def _input_rows(args, path: str, topic: str, configs: dict, report, *, labels: bool = True) -> list:
    """The records of an examples or queries file (streams/tools/userfiles.py: JSONL, CSV or
    Parquet; labels read as -1/+1); how the labels were read, and the table columns left
    out, go to ``report`` (said at the end)."""
    from dpstream.streams.tools.userfiles import (FileError, LabelError, TableSpec, file_format, map_labels,
                                                  read_rows)
    model_id = args.model_id or (next(iter(configs)) if len(configs) == 1 and args.cmd == "run" else None)
    spec = TableSpec(topic, model_id, args.label_column, args.id_column,
                     "--model-id" if args.model_id else "the one model of --models",
                     args.privacy_id_column)
    name = "standard input" if path == "-" else path
    try:
        rows, left_out = read_rows(path, file_format(path, args.format), spec, configs)
        if topic == topics.EXAMPLES and labels:
            note = map_labels(rows, name)
            if note:
                report.notes.append(note)
    except (FileError, LabelError) as err:
        raise Failed(f"{err}; nothing {'sent' if args.cmd == 'produce' else 'run'}", 2) from None
    report.left_out += [c for c in left_out if c not in report.left_out]
    return rows


def _strict(args, report) -> None:
    """--strict: refuse, before anything is sent or run, data the report finds mistakes in.
    Always refused: a declared field missing from every record beside a column of nearly
    its name (``OwnerReport.misnamed``): sent, the records cannot be taken back."""
    done = "sent" if args.cmd == "produce" else "run"
    misnamed = report.misnamed()
    if misnamed:
        model, field, column = misnamed[0]
        raise Failed(f"model {model} declares {field!r}, missing from every record, and the file has "
                     f"a column {column[:40]!r} no model declares: rename the column {field!r} (or "
                     f"declare it); nothing {done}", 2)
    if args.strict and report.mistakes():
        for line in report.lines(args.cmd):
            print(line, file=sys.stderr)
        raise Failed(f"--strict: values of the wrong type or undeclared fields (above); nothing {done}")


def cmd_run(args) -> int:
    from dpstream.streams.tools.embedded import EmbeddedRuntime
    from dpstream.streams.tools.owner_report import OwnerReport
    if [args.models, args.examples, args.queries].count("-") > 1:      # the second would read nothing
        raise Failed("standard input (-) can be one of --models, --examples, --queries, not two", 2)
    models = _read_models(args.models)
    configs = _models_in(models)
    _say_notes("run", configs.values())
    report = OwnerReport(configs)
    items = [(topics.MODELS, r) for r in models]
    for topic, path in ((topics.EXAMPLES, args.examples), (topics.QUERIES, args.queries)):
        for row in _input_rows(args, path, topic, configs, report) if path else []:
            report.add(row.value)
            items.append((topic, row.raw))
    _strict(args, report)
    rng = _key()
    out = out_dir(args.out)                   # refused before the run, not after it
    with out:                                 # a directory made here and left empty is removed on failure
        state = _state_file(args.state) if args.state is not None else None
        log, outputs = [], {}                 # what earlier runs with this state wrote
        skipped = 0
        try:
            rt = EmbeddedRuntime(rng, state)
            if state is not None:
                _same_inputs(state, items, rng)
                skipped = _say_skipped(state, items)
                log, outputs = state.kept_outputs()
            progress = Progress("dpstream run", len(items), quiet=args.quiet)
            try:
                asyncio.run(rt.feed_all(items, progress.advance))
            except KeyboardInterrupt:
                raise Failed("interrupted: nothing written" + (
                    f", nothing of this run kept in {args.state}" if state is not None else ""), 130) from None
            progress.done()
            if state is not None:
                _remember_inputs(state, items, rng)
                state.commit()                # with the records the runtime kept in it
        except sqlite3.Error as err:          # held by another program (locked), a full disk...
            raise Failed(f"--state {args.state}: {err}; nothing of this run kept in it", 2) from None
        finally:
            if state is not None:
                state.close()
        earlier = len(log) + sum(map(len, outputs.values()))
        with refused_out():                   # the whole stream's export, earlier runs' records first
            write_export(out, log + rt.log, {t: [*outputs.get(t, []), *rt.outputs[t]] for t in topics.OUTPUTS})
    print(f"dpstream run: {len(items) - skipped:,} inputs -> "
          + ", ".join(f"{len(rt.outputs[t]):,} {t}" for t in topics.OUTPUTS) + f" in {out.path}"
          + (f" (with the {earlier:,} records of earlier runs with this state)" if earlier else ""))
    if not (args.examples or args.queries):
        print("dpstream run: no --examples or --queries: only the registrations were run", file=sys.stderr)
    for line in report.lines("run"):
        print(line, file=sys.stderr)
    refused = [r for r in rt.outputs[topics.REJECTED] if r["source"].startswith(topics.MODELS + ":")]
    for r in refused:
        print(f"dpstream run: registration at {r['source']} refused: {r['reason']}", file=sys.stderr)
    for line in _unanswered(rt.outputs[topics.ANSWERS], _accepted(log + rt.log)):
        print(line, file=sys.stderr)
    dead = [r for r in rt.outputs[topics.REJECTED] if not r["source"].startswith(topics.MODELS + ":")]
    if dead:
        reasons = Counter(r["reason"] for r in dead).most_common(3)
        print(f"dpstream run: {len(dead):,} of {len(items) - len(models):,} examples and queries "
              f"rejected ({out.path / (topics.REJECTED + '.jsonl')}): "
              + "; ".join(f"{n:,} {reason}" for reason, n in reasons), file=sys.stderr)
    return 1 if refused or dead else 0


#: why a query of this run got no label, by status, where the kind says nothing more
NO_LABEL = {"learning": "nothing released yet: these queries came before the model's first release"}


def _accepted(log: list[dict]) -> dict:
    """The registrations the runtime accepted, by model id, from its model-events log (not
    the models file: there a refused registration may come first)."""
    from dpstream.schemas import ModelConfig
    return {r["value"]["event"]["model_id"]: ModelConfig.model_validate(r["value"]["event"])
            for r in log if r["value"]["event"].get("type") == "model"}


def _unanswered(answers: list[dict], configs: dict) -> list[str]:
    """One line per model with queries this run left without a label, by status (before:
    a predictor registered for 3,000 examples per epoch and sent 2,500 answered none of
    its queries, exit 0, without a word: a newcomer's pass). Statuses are public."""
    from dpstream.agents.kinds import kind
    asked: Counter = Counter()
    by_model: dict[str, Counter] = {}
    for a in answers:
        if a.get("kind") == "query":
            asked[a["model_id"]] += 1
            if a.get("label") is None:
                by_model.setdefault(a["model_id"], Counter())[a["status"]] += 1
    lines = []
    for model, statuses in by_model.items():
        status = statuses.most_common(1)[0][0]
        config = configs.get(model)
        handler = kind(config.kind) if config else None
        why = ((handler.learning_note(config) if handler and status == "learning" else None)
               or NO_LABEL.get(status) or (handler.after_stop.get(status) if handler else None))
        counts = ", ".join(f"{name} {n:,}" for name, n in statuses.most_common())
        lines.append(f"dpstream run: model {model}: {sum(statuses.values()):,} of {asked[model]:,} queries "
                     f"got no label ({counts})" + (f"; {status}: {why}" if why else ""))
    return lines


def _state_file(path: str):
    """``--state``'s SQLite file, or Failed (exit 2) saying in one line why it cannot be."""
    from dpstream.streams.tools.embedded import SqliteState, StateFileError
    try:
        return SqliteState(path)
    except StateFileError as err:
        raise Failed(f"--state {err}", 2) from None


def _input_digest(rng, items, topic: str, n: int) -> str:
    """HMAC-SHA256 over the first ``n`` records of one input, each length-prefixed, under a
    key derived from the secret key: a plain hash of a few records could be inverted by
    guessing them, so only a keyed MAC is written, even to the private state file."""
    import hashlib
    import hmac
    h = hmac.new(rng.stream_key("embedded-state", "input-digest", 0), digestmod=hashlib.sha256)
    for _, raw in [it for it in items if it[0] == topic][:n]:
        raw = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
        h.update(len(raw).to_bytes(8, "big") + raw)
    return h.hexdigest()


def _same_inputs(state, items, rng) -> None:
    """Failed (exit 2) when an input differs from what an earlier run with this state read:
    a --state run reads each input as a topic that only grows, and skips what it read.
    Before, another file (or an edited model file) was skipped by position without a word:
    "0 predictions", exit 0, and a changed budget was ignored."""
    counts = Counter(topic for topic, _ in items)
    for topic in (topics.MODELS, topics.EXAMPLES, topics.QUERIES):
        read = state.get(f"embedded/read/{topic}")
        if not read:
            continue
        n = read["n"]
        if counts[topic] < n:
            raise Failed(f"--state: this run gives {counts[topic]:,} {topic}, an earlier run with this state "
                         f"read {n:,}: a --state run reads each input as a topic that only grows; give "
                         "the same file (with records appended), or a new --state", 2)
        if _input_digest(rng, items, topic, n) != read["mac"]:
            raise Failed(f"--state: these {topic} are not the ones an earlier run with this state read "
                         f"(its first {n:,}), or the secret key is not the one it ran with: a --state run "
                         "reads each input as a topic that only grows; append new records to the same "
                         "file, or give a new --state", 2)


def _remember_inputs(state, items, rng) -> None:
    """What this run read, per input (``_same_inputs`` checks the next run against it)."""
    counts = Counter(topic for topic, _ in items)
    for topic in (topics.MODELS, topics.EXAMPLES, topics.QUERIES):
        if counts[topic] or state.get(f"embedded/read/{topic}"):
            state[f"embedded/read/{topic}"] = {"n": counts[topic], "mac": _input_digest(rng, items, topic, counts[topic])}


def _say_skipped(state, items) -> int:
    """With ``--state`` each input is read as a topic that an earlier run may have read
    part of: the records at positions it already handled are skipped, as a restarted
    worker skips what it committed. Say so, per input, so a different file given to the
    same state is not silently ignored; return how many are skipped."""
    from dpstream.agents.sequencer import last_handled
    counts = Counter(topic for topic, _ in items)
    skipped = 0
    for topic in (topics.MODELS, topics.EXAMPLES, topics.QUERIES):
        done = min(last_handled(state, topic, 0) + 1, counts[topic])
        skipped += done
        if done:
            print(f"dpstream run: --state: the first {done:,} of {counts[topic]:,} {topic} were read by an "
                  f"earlier run with this state and are skipped (a --state run reads each input as a "
                  f"topic: append new records to the same file)", file=sys.stderr)
    return skipped


@contextmanager
def refused_out():
    """A refused ``--out`` directory or file (streams/tools/outdir.py) as Failed, exit 2: one
    line that says why, nothing written."""
    from dpstream.streams.tools.outdir import UnsafeOut
    try:
        yield
    except UnsafeOut as err:
        raise Failed(f"--out {err}", 2) from None


def out_dir(path: str, *, private: bool = True):
    """The ``--out`` directory of export, run and audit-report, opened for writing
    (streams/tools/outdir.py: created 0700 if missing, never chmod-ed, nothing followed out of
    it), checked before the command does its work."""
    from dpstream.streams.tools.outdir import OutDir
    with refused_out():
        return OutDir(path, private=private).__enter__()


def _owner_only(out) -> None:
    """An internal report's directory: one only its owner may open (0700, as it is created).
    An existing directory others may list is refused: its files are 0600, but the internal
    report took the public one's name there (report.html in the directory a public report
    was shared from), so a newcomer's ``--out report/ --internal`` after ``--out report/``
    swapped the shared report for the private one."""
    mode = stat.S_IMODE(os.fstat(out.fd).st_mode)
    if mode & 0o077:
        out.__exit__(None, None, None)
        raise Failed(f"--out {out.path}: other users may open it (mode {mode:04o}); an internal report "
                     "goes in a directory only you can open: give a new directory (it is created "
                     f"0700), or chmod 700 {out.path}", 2)


def write_export(out, log: list[dict], outputs: dict, *, public: bool = False,
                 written: tuple[str, ...] = topics.OUTPUTS) -> None:
    """The layout `dpstream export` and `dpstream run` write and `dpstream replay --dir`
    reads, into ``out`` (an open ``out_dir`` or a path). ``model-events.jsonl`` holds raw
    features and labels: the directory is created 0700 and every file is 0600. Staged
    (streams/tools/outdir.py ``OutDir.staged``): interrupted, it leaves the previous export
    or none, never a truncated one; the first file (``model-events.jsonl``, or
    ``predictions.jsonl`` for ``public``) is the marker, put in place last. ``public``
    (``export --public``): the output topics only, no model-events.jsonl. ``written``: the
    output topics given a file (a topic a deployment does not have gets none)."""
    from dpstream.streams.tools.outdir import OutDir
    names = ([] if public else [f"{topics.MODEL_EVENTS}.jsonl"]) + [f"{t}.jsonl" for t in written]
    with (OutDir(out, private=True) if isinstance(out, (str, Path)) else out) as where, \
            where.staged(names) as files:
        for rec in [] if public else log:
            files[f"{topics.MODEL_EVENTS}.jsonl"].write(json.dumps(rec).encode() + b"\n")
        for topic in written:
            fh = files[f"{topic}.jsonl"]
            for value in outputs.get(topic, []):
                fh.write(json.dumps(value).encode() + b"\n")


class NothingToAudit(Exception):
    """An audit was asked of an export that holds no model events."""


def _read_export_file(path: Path) -> bytes:
    """A file of an export directory, opened without following a symbolic link
    (O_NOFOLLOW, as streams/tools/outdir.py writes it) and checked once open to be a
    regular file: a link planted in the directory must not make an audit read, and
    report on, a file outside it. Before, ``ledger.jsonl`` as a link to another file was
    followed. NothingToAudit (exit 2, "unreadable") names the file otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP or os.path.islink(path):     # ELOOP: O_NOFOLLOW met a link
            raise NothingToAudit(f"{path} is a symbolic link: an export's files are read only "
                                 "from the directory itself, not followed") from None
        raise NothingToAudit(f"{path}: cannot be read ({err.strerror or err})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):        # before fdopen, which refuses a directory
        os.close(fd)
        raise NothingToAudit(f"{path} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        try:
            return fh.read()
        except OSError as err:
            raise NothingToAudit(f"{path}: cannot be read ({err.strerror or err})") from None


def read_export(src: Path, *, public: bool = False) -> tuple[list[dict], dict]:
    """The log and outputs of an export directory; :class:`NothingToAudit` when it is
    missing or holds no model event (an audit of nothing must not say OK). ``public``
    (``replay --no-key``): the log is not needed (an export of the public topics, as
    ``export --public`` writes, has none), but some output record is. Every record keeps
    its file and line (replay.Located): a line that is not JSON or not a record of its
    topic is reported by them, never a traceback."""
    from dpstream.streams.tools.replay import Located, parse_json

    def load(name):
        """The file's records, each with its line; a line that is not JSON (or not UTF-8)
        becomes parse_json's marker, which replay counts and names by its line."""
        path = src / f"{name}.jsonl"
        if not os.path.lexists(path):
            return []
        data = _read_export_file(path)
        lines = [(n, line) for n, line in enumerate(data.splitlines(), 1) if line.strip()]
        return Located([parse_json(line) for _, line in lines], [f"{path.name} line {n}" for n, _ in lines])
    try:
        os.listdir(src)                       # a directory this user may not read: said in one line
    except NotADirectoryError:
        raise NothingToAudit(f"{src} is not an export directory") from None
    except FileNotFoundError:
        raise NothingToAudit(f"{src} is not an export directory (it does not exist)") from None
    except OSError as err:
        raise NothingToAudit(f"{src} cannot be read ({err.strerror})") from None
    if not public and not (src / f"{topics.MODEL_EVENTS}.jsonl").is_file():
        raise NothingToAudit(f"{src} is not an export directory (no {topics.MODEL_EVENTS}.jsonl; "
                             "`dpstream replay --no-key` checks an export of the public topics)")
    if public and not (src / f"{topics.PREDICTIONS}.jsonl").is_file():     # the marker of export --public
        raise NothingToAudit(f"{src} is not an export directory (no {topics.PREDICTIONS}.jsonl)")
    log = [] if public else load(topics.MODEL_EVENTS)
    if not log and not public:
        raise NothingToAudit(f"{src}/{topics.MODEL_EVENTS}.jsonl holds no model events")
    outputs = {t: load(t) for t in topics.OUTPUTS      # answers.jsonl: since issue 41
               if t != topics.ANSWERS or (src / f"{t}.jsonl").exists()}
    if public and not any(outputs.values()):
        raise NothingToAudit(f"{src} holds no published record ({', '.join(topics.OUTPUTS)})")
    return log, outputs


async def _export_kafka(kafka: Kafka, prefix: str, timeout: float, *, public: bool = False
                        ) -> tuple[list[dict], dict]:
    """The log and the output topics as they are, each read to the end it had when the read
    began (topicread.read_to_end: no idle wait per topic, and a topic that does not exist
    is not created by asking): a record that is not JSON is kept as a
    marker, so that replay (now, or on the export later) counts it (replay.screen).
    ``public``: the output topics only (what an auditor may read; the log stays empty)."""
    from dpstream.streams.tools.replay import parse_json
    from dpstream.streams.tools.topicread import TopicMissing, check_topic_name, read_to_end
    present = []
    for t in ([] if public else [topics.MODEL_EVENTS]) + list(topics.OUTPUTS):
        try:
            await check_topic_name(kafka, prefix + t, prefix)    # TopicMissing: says what creates it
        except TopicMissing:
            if t != topics.ANSWERS:      # a deployment from before the answers topic (as read_export)
                raise
            continue
        present.append(t)
    log = [] if public else [
        {"partition": r.partition, "offset": r.offset, "value": parse_json(r.value)}
        for r in await read_to_end(kafka, prefix + topics.MODEL_EVENTS, timeout=timeout)]
    outputs = {t: [parse_json(r.value) for r in await read_to_end(kafka, prefix + t, timeout=timeout)]
               for t in topics.OUTPUTS if t in present}
    return log, outputs


def _reading(prefix: str, public: bool) -> str:
    """What an export reads, for the line that names a missing right."""
    return (f"Read topic {prefix}{topics.PREDICTIONS} and the other output topics" if public else
            f"Read topic {prefix}{topics.MODEL_EVENTS} and the output topics")


AUDITOR_HINT = ("; an auditor, who may not read the private log, exports the public topics "
                "with --public and checks them with `dpstream replay --no-key`")


def _read_deployment(kafka: Kafka, args, public: bool):
    """export / replay from Kafka: the topics read, or Failed naming the missing right (and,
    for the private log, what an auditor runs instead)."""
    from dpstream.streams.tools.topicread import TopicMissing
    try:
        return _broker_call(kafka, _export_kafka(kafka, args.prefix, args.timeout, public=public),
                            _reading(args.prefix, public), passing=(TopicMissing,))
    except TopicMissing as err:
        raise Failed(f"{err}: nothing read") from None
    except Failed as err:
        if not public and f"may not Read topic {args.prefix}{topics.MODEL_EVENTS}" in str(err):
            raise Failed(f"{err}{AUDITOR_HINT}", err.code) from None
        raise


def cmd_export(args) -> int:
    kafka = _kafka(args)
    with out_dir(args.out) as out:          # a directory made here and left empty is removed on failure
        log, outputs = _read_deployment(kafka, args, args.public)
        with refused_out():
            write_export(out, log, outputs, public=args.public, written=tuple(outputs))
    print("dpstream export: " + (f"{len(log):,} model events, " if not args.public else "")
          + ", ".join(f"{len(v):,} {k}" for k, v in outputs.items()) + f" -> {args.out}"
          + (" (public topics only: `dpstream replay --no-key --dir` checks it)" if args.public else ""))
    return 0


def _only_models(log: list, outputs: dict, wanted: set[str]) -> dict:
    """The published records of the ``--model`` models only (``replay --no-key`` checks
    those; with the key, replay compares only them); NothingToAudit naming every asked-for
    model of which neither the log nor any output holds a record (before, ``--model nosuch``
    replayed nothing and printed "OK")."""
    def model_of(r):
        if not isinstance(r, dict):
            return None
        event = r.get("value", {}).get("event") if isinstance(r.get("value"), dict) else None
        return (event if isinstance(event, dict) else r).get("model_id")
    present = {model_of(r) for r in log} | {model_of(r) for rs in outputs.values() for r in rs}
    present.discard(None)
    missing = sorted(wanted - present)
    if missing:
        here = ", ".join(sorted(map(str, present))[:10]) or "none"
        raise NothingToAudit(f"no record of model {', '.join(map(repr, missing))} "
                             f"(models with records: {here})")
    return {t: [r for r in rs if model_of(r) in wanted] for t, rs in outputs.items()}


def cmd_replay(args) -> int:
    from dpstream.streams.tools.replay import WrongKeyError, public_verdict, replay
    try:
        if args.dir:
            log, outputs = read_export(Path(args.dir), public=args.no_key)
        else:
            kafka = _kafka(args)
            # without the key nothing is recomputed: the private log is not read (an auditor
            # has no right to it), only the output topics
            log, outputs = _read_deployment(kafka, args, args.no_key)
            if not log and not args.no_key:
                raise NothingToAudit(f"no model events on {args.prefix}{topics.MODEL_EVENTS} at "
                                     f"{kafka.bootstrap}")
            if args.no_key and not any(outputs.values()):
                raise NothingToAudit(f"no published record on the output topics at {kafka.bootstrap}")
        wanted = set(args.model) if args.model else None
        if wanted:
            outputs = _only_models(log, outputs, wanted)
    except NothingToAudit as err:
        raise Failed(f"{err}: nothing verified", 2) from None
    if args.no_key:
        verdict = public_verdict(outputs)
        print(verdict.text)
        return 0 if verdict.ok else 1
    rng = _key()
    progress = Progress("replay", len(log))
    try:
        report = asyncio.run(replay(rng, log, outputs, wanted, progress.advance))
    except WrongKeyError as err:
        raise Failed(str(err), 2) from None
    finally:
        progress.done()
    print(report.summary())
    return 0 if report.ok else 1


def cmd_audit_report(args) -> int:
    from dpstream.streams.tools.replay import WrongKeyError, public_verdict, replay, screen
    from dpstream.streams.tools.report import build_report
    if args.internal and args.no_key:
        raise Failed("--internal recomputes mistakes with the key; drop --no-key", 2)
    try:
        log, outputs = read_export(Path(args.dir))
    except NothingToAudit as err:
        raise Failed(f"{err}: no report written", 2) from None
    mistakes = {} if args.internal else None
    rng = None
    if not args.no_key and not KeyedRandomness.configured():
        if args.internal:
            raise Failed("--internal needs the key ($DPSTREAM_SECRET_KEY or $DPSTREAM_SECRET_KEY_FILE)", 2)
        print("dpstream audit-report: no key configured: writing the keyless report "
              "(releases marked not verified)", file=sys.stderr)
    elif not args.no_key:
        try:
            rng = KeyedRandomness.from_env()
        except MissingKeyError as err:        # configured but unusable: refused, as everywhere
            raise Failed(f"{err}; no report written", 2) from None
    out = out_dir(args.out, private=args.internal)
    if args.internal:
        _owner_only(out)
    with out:                                 # a directory made here and left empty is removed on failure
        # the verdict is replay's (or replay --no-key's) on every record read, forged ones
        # included; the figures are drawn from the valid records, and the report lists the rest
        if rng is None:
            verdict = public_verdict(outputs, log)
        else:
            try:
                verdict = asyncio.run(replay(rng, log, outputs, mistakes=mistakes)).verdict()
            except WrongKeyError as err:      # a traceback before
                raise Failed(f"{err}; no report written", 2) from None
        log, outputs, _ = screen(log, outputs)
        with refused_out():
            path = build_report(log, outputs, out, verdict, mistakes, private=args.internal)
    form = "INTERNAL (contains information about the private examples)" if args.internal else "public"
    print(f"dpstream audit-report: {path} ({form})")
    if not verdict.ok:                        # the report says FAILED; the exit code says so too
        what = ("did not verify" if verdict.keyed else
                "fails the checks that need no key, as replay --no-key")
        print(f"dpstream audit-report: the export {what} (the report shows it too):\n"
              f"{verdict.text.rstrip()}", file=sys.stderr)
        return 1
    return 0


HELPER_START_TIMEOUT = 60.0     # seconds the worker waits for its noise helper at start


def _default_data_dir(app_id: str) -> Path:
    """Where a worker keeps faust's local files unless told: the user's state directory
    (``$XDG_STATE_HOME``, else ~/.local/state), not /tmp, where another local user could
    make the directory first (streams/tools/outdir.py ``private_dir``)."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    # the XDG Base Directory spec: a relative path in $XDG_STATE_HOME is invalid and ignored
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "dpstream" / f"worker-{app_id}"


def cmd_worker(args) -> int:
    import faust

    from dpstream.mechanisms.accounting import preload
    from dpstream.mechanisms.continual import draw_ahead_in_a_process, start_helper

    from dpstream.streams.worker.app import WorkerApp, keep_secrets_from_children
    from dpstream.streams.worker.faust_seam import contract
    from dpstream.streams.worker.observe import (quiet_startup_logs, token_middleware, web_bind, web_port_problem,
                                                 web_token, web_warning)
    from dpstream.streams.worker.topic_admin import TopicsRefused, start_check
    from dpstream.streams.worker.topic_plan import PlanError
    from dpstream.streams.worker.tuning import hold_full_collections, shorten_thread_switches
    from dpstream.streams.tools.acls import check_names
    from dpstream.streams.tools.outdir import UnsafeOut, private_dir

    from .topics import tools as topic_fixes
    rng = _key()
    bind = web_bind(args.web_bind)
    app_id = args.app_id or args.prefix + "dpstream"
    try:                                  # before any connection: a refusal changes nothing
        check_names(args.prefix, app_id)  # its group and changelogs within its tenant's prefix
    except ValueError as err:
        raise Failed(str(err), 2) from None
    if args.web_port is not None and (problem := web_port_problem(bind, args.web_port)):
        raise Failed(problem, 2)
    web_options = {}
    if args.web_token_file is not None:   # observe.py: who may read the pages
        if args.web_port is None:
            raise Failed("--web-token-file protects the pages of --web-port: give both", 2)
        try:
            web_options["middlewares"] = [token_middleware(web_token(args.web_token_file))]
        except ValueError as err:
            raise Failed(str(err), 2) from None
    try:
        if args.data_dir is not None and not args.data_dir.strip():
            raise UnsafeOut("is empty", "give a directory, or leave the option out for the "
                            "default under ~/.local/state")
        data_dir = private_dir(args.data_dir or _default_data_dir(app_id))
    except UnsafeOut as err:
        raise Failed(f"--data-dir {err}", 2) from None
    problems = contract()
    if problems:
        raise Failed("the installed faust / mode / aiokafka lack what the worker relies on "
                     f"(streams/worker/faust_seam.py): {'; '.join(problems)}")
    preload()                             # not on the loop at the first registration
    kafka = _kafka(args)
    keep_secrets_from_children()          # read: the processes it starts need none of them
    # the fixes it names run as an admin: a placeholder for the admin's config
    fixes = topic_fixes(args, args.broker or kafka.bootstrap, "ADMIN.properties" if kafka.sasl or kafka.tls else None)
    try:
        checked = _broker_call(kafka, start_check(kafka, fixes, prefix=args.prefix, app_id=app_id,
                                                  partitions=args.partitions, replication=args.replication_factor,
                                                  min_insync=args.min_insync_replicas),
                               "Describe and Create the topics" + (f" {args.prefix}*" if args.prefix else ""),
                               passing=(TopicsRefused, PlanError))
    except (TopicsRefused, PlanError) as err:
        raise Failed(str(err), 2 if isinstance(err, PlanError) else 1) from None
    if checked.created:
        print(f"dpstream worker: created {len(checked.created)} topic(s) as planned (`dpstream topics plan`)",
              file=sys.stderr)
    for line in checked.warnings:
        print(f"dpstream worker: {line}", file=sys.stderr)

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
                f", status on {bind}:{args.web_port}/status/" if args.web_port else "")
            if args.web_port and (warning := web_warning(bind, args.web_port, bool(web_options))):
                logging.getLogger("dpstream").warning(warning)

    worker_app = WorkerApp(kafka=kafka, rng=rng, partitions=args.partitions, replication=checked.replication,
                           app_id=app_id,
                           data_dir=data_dir, web_port=args.web_port, web_bind=bind,
                           prefix=args.prefix,
                           latency_metrics=args.latency_metrics, consumer_thread=args.consumer_thread,
                           # every topic exists as planned (start_check): faust declares none, which
                           # without Create rights would crash on a topic its metadata had not listed yet
                           faust_settings={"topic_allow_declare": False,
                                           **({"web_application_options": web_options} if web_options else {})})
    worker = Worker(worker_app.app, loglevel=args.loglevel, quiet=True)
    worker.execute_from_commandline()
    return 0


class Delivery:
    """How far a send got: records handed to the producer, and the acknowledged prefix
    (every record before it acknowledged by the broker: what a resumed run skips)."""

    def __init__(self, total: int, progress=None):
        self.sent = self.acked = self.acked_any = 0
        self._done = bytearray(total)
        self.progress = progress
        self.error: BaseException | None = None      # the first refusal the broker sent back

    def on_ack(self, i: int):
        def done(future) -> None:
            if future.cancelled():
                return
            if future.exception() is not None:
                self.error = self.error or future.exception()
                return
            self._done[i] = 1
            self.acked_any += 1
            start = self.acked
            while self.acked < len(self._done) and self._done[self.acked]:
                self.acked += 1
            if self.progress is not None and self.acked > start:
                self.progress.advance(self.acked - start)
        return done


def _key_of(row) -> bytes | None:
    key = row.value.get("model_id") if isinstance(row.value, dict) else None
    # surrogatepass: a model id with a lone surrogate (sent with --no-check) is keyed, not
    # a traceback; the worker dead-letters it for its model id (schemas/limits.py)
    return key.encode("utf-8", "surrogatepass") if isinstance(key, str) else None


async def _produce(kafka: Kafka, topic: str, rows, delivery: Delivery) -> None:
    """Send ``rows`` keyed by model id (the key fixes the partition, so a model's events
    keep their order); ``delivery`` counts what was sent and acknowledged. Stopping the
    producer, also when interrupted, waits for the records in flight (aiokafka's
    ``stop`` flushes), so an interrupted run's acknowledged prefix is exact. A
    record the broker refused (no Write right on a topic the principal may Describe)
    raises its error once the rest are answered: before, ``models register`` said "sent"
    and ``produce`` "0 records ... acknowledged", exit 0, when the broker had refused every
    record (tests/streams/test_kafka_secure.py)."""
    async with running(kafka.producer(acks="all", enable_idempotence=True)) as producer:
        for i, row in enumerate(rows):
            future = await producer.send(topic, key=_key_of(row), value=row.raw)
            future.add_done_callback(delivery.on_ack(i))
            delivery.sent += 1
            if delivery.error is not None:    # refused (a right, a size): stop sending
                break
        await producer.flush()
    if delivery.error is not None:        # flush() waits for the answers, it raises none of them
        raise delivery.error


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


def _in_force(kafka: Kafka, args, doing: str) -> tuple[dict | None, str | None]:
    """The registrations in force (streams/tools/topicread.py), after waiting for a worker to
    create the topics; (None, why) when this principal may not read the models topic (the
    least-privilege producer and querier may not: nothing is checked against it then)."""
    from aiokafka.errors import TopicAuthorizationFailedError

    from dpstream.streams.tools.topicread import TOPIC_WAIT, TopicMissing, registrations
    try:
        return _broker_call(kafka, registrations(kafka, args.prefix, wait=TOPIC_WAIT),
                            f"Read topic {args.prefix}{topics.MODELS}",
                            passing=(TopicMissing, TopicAuthorizationFailedError)), None
    except TopicMissing as err:
        raise Failed(f"{err}; nothing {doing}") from None
    except TopicAuthorizationFailedError:
        return None, (f"{kafka.principal} may not read {args.prefix}{topics.MODELS}, so model ids "
                      "and declarations were not checked (the models topic is public "
                      "configuration: an admin may grant Read on it)")


def _unknown_models(rows, in_force: dict) -> str | None:
    """Which model ids of ``rows`` have no registration in force (None: all have)."""
    ids = Counter(r.value.get("model_id") for r in rows if isinstance(r.value, dict))
    unknown = {m: n for m, n in ids.items() if m not in in_force}
    if not unknown:
        return None
    shown = ", ".join(f"{str(m)[:40]!r} ({n:,} records)" for m, n in sorted(
        unknown.items(), key=lambda kv: -kv[1])[:5])
    known = ", ".join(sorted(in_force)[:10]) or "none"
    return f"no registration in force for model id {shown} (registered: {known})"


def cmd_produce(args) -> int:
    try:
        return _produce_file(args)
    except KeyboardInterrupt:
        print("dpstream produce: interrupted before sending: nothing sent", file=sys.stderr)
        return 130


def _on_a_terminal(label: str, total: int) -> Progress:
    """Produce's progress: a bar on a terminal, nothing when piped (a script's log gets
    the result alone, and a failure stays one line)."""
    return Progress(label, total, quiet=not sys.stderr.isatty())


def _one_document(path: str) -> bool:
    """Whether a file (not standard input, read once already) holds one JSON document
    that spans lines: a pretty-printed model config given to ``produce --topic models``."""
    if path == "-":
        return False
    from dpstream.streams.tools.userfiles import FileError, read_bytes
    try:
        text = read_bytes(path)
        json.loads(text)
    except (FileError, ValueError, RecursionError):
        return False
    return len(text.strip().splitlines()) > 1


def _checked_rows(args, configs: dict, report) -> tuple[list, int]:
    """The records ``produce`` sends, after ``--skip`` (and the file's record count):
    read, labels read as -1/+1, and each checked for its form (``check_record``) unless
    ``--no-check``."""
    name = "standard input" if args.file == "-" else args.file
    if args.topic == topics.MODELS:
        from dpstream.streams.tools.userfiles import FileError, read_jsonl
        try:
            rows = read_jsonl(args.file)
        except FileError as err:
            raise Failed(str(err), 2) from None
    else:
        rows = _input_rows(args, args.file, args.topic, configs, report)
    total = len(rows)
    if not 0 <= args.skip <= total:
        raise Failed(f"--skip {args.skip}: between 0 and the {total:,} records of {name}", 2)
    rows = rows[args.skip:]
    if args.no_check:
        return rows, total
    progress = _on_a_terminal("dpstream produce: checking", len(rows))
    try:
        for row in rows:
            problem = check_record(args.topic, row.raw)
            progress.advance()
            if problem and args.topic == topics.MODELS and _one_document(args.file):
                raise Failed(f"{name} is one JSON document over many lines, and produce sends one "
                             "record per line (JSONL): register a model file with `dpstream models "
                             f"register {name}` (a JSON document, a list, or JSONL)", 2)
            if problem:
                raise Failed(f"{name} {row.where} would be dead-lettered on {args.topic}: "
                             f"{problem}; nothing sent (--no-check sends anyway; the worker's "
                             f"verdicts are on the {topics.REJECTED} topic)")
    finally:
        progress.done()
    return rows, total


def _produce_file(args) -> int:
    from dpstream.streams.tools.owner_report import OwnerReport
    from dpstream.streams.tools.userfiles import file_format
    if args.topic not in topics.INPUTS:
        from difflib import get_close_matches
        guess = get_close_matches(args.topic, topics.INPUTS, n=1)
        raise Failed(f"--topic must be one of {', '.join(topics.INPUTS)}"
                     + (f" (did you mean {guess[0]}?)" if guess else "")
                     + " (the worker writes every other topic)", 2)
    report = OwnerReport({})
    local = args.topic == topics.MODELS or file_format(args.file, args.format) == "jsonl"
    if local:                 # what needs no broker first: a file's mistakes before the broker's
        rows, total = _checked_rows(args, {}, report)
    elif args.file != "-":    # a table: read once without the declarations, so that a missing
        # file, its encoding, quoting or labels are said before an unreachable broker is
        # (standard input can be read once only: it is read after connecting)
        _input_rows(args, args.file, args.topic, {}, OwnerReport({}))
    kafka = _kafka(args)
    in_force, unchecked = (({}, "--no-check reads no registration") if args.no_check
                           else _in_force(kafka, args, "sent"))
    configs = in_force or {}
    report = OwnerReport(configs, left_out=report.left_out, notes=report.notes)
    if not local:             # table cells are typed by the models' declarations
        rows, total = _checked_rows(args, configs, report)
    name = "standard input" if args.file == "-" else args.file
    if in_force is not None and not args.no_check:
        problem = (_registration_conflicts(rows, in_force) if args.topic == topics.MODELS
                   else _unknown_models(rows, in_force))
        if problem:
            raise Failed(f"{name}: {problem}; nothing sent (--no-check sends anyway)")
    if args.strict and unchecked:
        raise Failed(f"--strict checks records against their models' declarations, and {unchecked}; "
                     "nothing sent", 2)
    for row in rows:
        report.add(row.value)
    _strict(args, report)
    delivery = Delivery(len(rows), _on_a_terminal("dpstream produce: sending", len(rows)))
    try:
        _broker_call(kafka, _produce(kafka, args.prefix + args.topic, rows, delivery),
                     f"Write topic {args.prefix}{args.topic}")
    except Failed as err:
        if delivery.sent == 0:
            raise Failed(f"{err} after 0 of {len(rows)} records were sent") from None
        raise Failed(f"{err} after {delivery.sent} of {len(rows)} records were sent, "
                     f"{args.skip + delivery.acked} of {total} acknowledged; resume with the same "
                     f"command and --skip {args.skip + delivery.acked}") from None
    except KeyboardInterrupt:
        delivery.progress.done()          # before the line below, which it would overwrite
        resume = f"resume with the same command and --skip {args.skip + delivery.acked}"
        beyond = delivery.acked_any - delivery.acked
        print(f"dpstream produce: interrupted: {args.skip + delivery.acked:,} of {total:,} records "
              f"sent and acknowledged; {resume}" + (f" ({beyond:,} records after them were acknowledged too "
                                            "and will be sent again)" if beyond else ""),
              file=sys.stderr)
        return 130
    finally:
        delivery.progress.done()
    skipped = f" (the first {args.skip:,} of {total:,} skipped)" if args.skip else ""
    print(f"dpstream produce: {delivery.acked:,} records -> {args.prefix}{args.topic}{skipped}, "
          f"acknowledged (dead letters, if any, appear on {args.prefix}{topics.REJECTED})", file=sys.stderr)
    for line in report.lines("produce"):
        print(line, file=sys.stderr)
    if unchecked and not args.no_check:
        print(f"dpstream produce: note: {unchecked}", file=sys.stderr)
    return 0


def cmd_consume(args) -> int:
    from dpstream.streams.tools.topicread import TopicMissing, check_topic_name, follow
    timeout = _consume_timeout(args)
    if args.max_messages is not None and args.max_messages < 0:
        raise Failed(f"--max-messages {args.max_messages}: a number of records, 0 or more", 2)
    kafka = _kafka(args)
    topic = args.prefix + args.topic
    counted = [0]

    def write(value: bytes) -> None:
        sys.stdout.write(value.decode(errors="replace") + "\n")
        sys.stdout.flush()

    async def consume():
        await check_topic_name(kafka, topic, args.prefix)
        await follow(kafka, topic, write, from_beginning=args.from_beginning, timeout=timeout,
                     limit=args.max_messages, counted=counted)
    try:
        _broker_call(kafka, consume(), f"Read topic {topic}", passing=(TopicMissing,))
    except TopicMissing as err:
        raise Failed(str(err), 2) from None
    except KeyboardInterrupt:
        print(f"dpstream consume: {counted[0]:,} records", file=sys.stderr)
        return 130
    return 0


MAX_TIMEOUT = 365 * 24 * 3600      # seconds: a year, far above any idle wait a user means


def _consume_timeout(args) -> float | None:
    """``consume``'s idle timeout in seconds, from --timeout or --timeout-ms (Kafka's console
    consumer: "If specified, exit if no message is available for consumption for the
    specified interval", ConsoleConsumerOptions); None: follow until interrupted. At most
    MAX_TIMEOUT (a year; no timeout follows for ever): before, ``--timeout 1e308`` became
    an infinite number of milliseconds and ended in "failed to Read topic answers ...
    (OverflowError)"."""
    if args.timeout is not None and args.timeout_ms is not None:
        raise Failed("--timeout and --timeout-ms: give one of them", 2)
    if args.timeout_ms is not None:
        if not 0 <= args.timeout_ms <= MAX_TIMEOUT * 1000:
            raise Failed(f"--timeout-ms {args.timeout_ms}: milliseconds, 0 to {MAX_TIMEOUT * 1000:,} "
                         "(a year; leave it out to follow until interrupted)", 2)
        return args.timeout_ms / 1000
    if args.timeout is not None and not (math.isfinite(args.timeout) and 0 <= args.timeout <= MAX_TIMEOUT):
        raise Failed(f"--timeout {args.timeout:g}: seconds, a finite number 0 to {MAX_TIMEOUT:,} "
                     "(a year; leave it out to follow until interrupted)", 2)
    return args.timeout


def cmd_models(args) -> int:
    if args.action == "register":
        return _register(args)
    if args.no_check:
        raise Failed(f"--no-check: only `models register` takes it, not `models {args.action}`", 2)
    if args.action == "show" and not args.target:
        raise Failed("name the model id", 2)
    # Configs come from the `models` topic (registrations only, never the model-events log,
    # which holds raw features): the registrations in force, as the worker decides them.
    # Each registration is judged by the worker's own code (topicread.decide): one it
    # dead-lettered is listed as refused, with its reason, never as in force.
    from dpstream.streams.tools.topicread import read_registrations, read_to_end
    kafka = _kafka(args)

    async def read():
        found = await read_registrations(kafka, args.prefix, timeout=args.timeout)
        return found, await read_to_end(kafka, args.prefix + topics.LEDGER, timeout=args.timeout)
    found, ledger = _broker_call(kafka, read(), f"Read topics {args.prefix}{topics.MODELS} and "
                                 f"{args.prefix}{topics.LEDGER}")
    models = found.in_force
    from dpstream.streams.tools.replay import parse_json, screen_topic
    entries, invalid = screen_topic(topics.LEDGER, [parse_json(r.value) for r in ledger])
    if invalid:
        print(f"dpstream models: on {args.prefix}{topics.LEDGER}, {invalid.line()} (`dpstream "
              "replay --no-key` checks the rest)", file=sys.stderr)
    spent = {e["model_id"]: e for e in entries}
    refused = [r for r in found.refused if args.action == "list" or r.model_id == args.target]
    if args.action == "show" and args.target not in models:
        why = (f"; the worker refused its registration at {refused[0].source}: {refused[0].reason}"
               if refused else "")
        raise Failed(f"no registration of {args.target!r} in force on {args.prefix}{topics.MODELS}"
                     f" (registered: {', '.join(sorted(models)[:10]) or 'none'}){why}")
    if args.action == "list" and not models:
        print(f"dpstream models: no registration in force on {args.prefix}{topics.MODELS} at "
              f"{kafka.bootstrap}", file=sys.stderr)
    for mid, cfg in sorted(models.items()):
        if args.action == "show" and mid != args.target:
            continue
        e = spent.get(mid)
        used = (f"eps {e['spent_epsilon']:.6g} of {cfg.budget.epsilon:g} (epoch {e['epoch']})" if e
                else f"eps 0 of {cfg.budget.epsilon:g} (nothing charged yet)")
        print(f"{mid:24s} {cfg.kind:16s} d={cfg.dimension:<8d} {used}")
        if args.action == "show":
            from dpstream.agents.kinds import kind
            from dpstream.agents.units import describe
            life = kind(cfg.kind).lifetime(cfg) if cfg.privacy_unit is not None else None
            print(f"privacy unit: {describe(cfg)}" + ("" if life is None else
                  f"; over the model's life epsilon {life.epsilon:.4g} per person at delta {life.delta:.3g}"))
            print(json.dumps(cfg.model_dump(mode="json", exclude_none=True), indent=1))
    for r in refused:               # dead-lettered by the worker: not in force
        print(f"{r.model_id if r.model_id is not None else '(no model id)':24s} {'refused':16s} "
              f"at {r.source}: {r.reason}")
    return 0


def _unique_names(path: str):
    """json's ``object_pairs_hook`` for a model file: Failed on a name given twice in one
    object. JSON leaves the meaning open and Python keeps the last, so ``"model_id": "a",
    ..., "model_id": "b"`` registered b without a word."""
    def pairs(items: list) -> dict:
        seen = set()
        for name, _ in items:
            if name in seen:
                raise Failed(f"{path}: {str(name)[:64]!r} is given twice in one object: keep one", 2)
            seen.add(name)
        return dict(items)
    return pairs


def parse_registrations(path: str) -> list:
    """The model configs of a file (one JSON object, a list, or JSONL), each validated as
    the worker will: schema, then feasibility (``Handler.config_problem``). Failed with
    what to fix (the line and column of a JSON error; the field, value and allowed range
    of a schema error) on the first that fails."""
    from pydantic import ValidationError

    from dpstream.agents.kinds import kind
    from dpstream.schemas import ModelConfig
    from dpstream.schemas.config import config_error_text
    from dpstream.schemas.features import new_names_problem
    from dpstream.schemas.limits import TOO_DEEP
    from dpstream.streams.tools.userfiles import FileError, read_bytes
    try:
        text = read_bytes(path).decode(errors="replace")
    except FileError as err:
        raise Failed(str(err), 2) from None
    path = "standard input" if path == "-" else path

    def loads(doc: str):
        try:
            return json.loads(doc, object_pairs_hook=_unique_names(path))
        except RecursionError:                   # a traceback before; the records' own limit
            raise Failed(f"{path}: {TOO_DEEP}", 2) from None
    try:
        docs = [(0, loads(text))]
    except ValueError as whole:
        docs = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                docs.append((i, loads(line)))
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
            problem = (new_names_problem(config.features) if config.features else None) \
                or kind(config.kind).config_problem(config)
            if problem:
                raise Failed(f"{at}: infeasible model config for {config.model_id}: {problem}")
            configs.append(config)
    return configs


def _registration_conflicts(rows, in_force: dict) -> str | None:
    """Registrations among ``rows`` (JSON records) that the worker would refuse because
    their id is in force with another config (None: no such one)."""
    from pydantic import ValidationError

    from dpstream.schemas import ModelConfig
    for row in rows:
        try:
            config = ModelConfig.model_validate(row.value)
        except (ValidationError, ValueError, TypeError):
            continue
        known = in_force.get(config.model_id)
        if known is not None and known.model_dump(mode="json") != config.model_dump(mode="json"):
            return f"{row.where}: {_differs(config, known)}"
    return None


def _differs(config, known) -> str:
    """One line: an id in force with another config, and the first setting that differs."""
    mine, theirs = config.model_dump(mode="json"), known.model_dump(mode="json")

    def first(a, b, at=""):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in list(a) + [k for k in b if k not in a]:
                if a.get(k) != b.get(k):
                    return first(a.get(k), b.get(k), f"{at}.{k}" if at else k)
        return at, a, b
    where, a, b = first(mine, theirs)
    show = (lambda v: json.dumps(v)[:40])
    return (f"model {config.model_id} is already registered with another config ({where}: "
            f"{show(b)} in force, {show(a)} here); the worker would refuse this one: register "
            "it under a new model id")


def _wire(config) -> bytes:
    """A registration as it is sent, and so as the worker measures it against the structural
    limits: compact JSON (no space after ',' and ':'; before, the limits were checked on
    json.dumps' default spacing, about 2% more, and a registration the worker would take
    was refused here as oversized)."""
    return json.dumps(config.model_dump(mode="json"), separators=(",", ":")).encode()


def _register(args) -> int:
    """Validate registrations locally (schema, feasibility and the structural limits, as the
    worker will), read the registrations in force (not with --no-check), and send only what
    the worker would accept and is new: an id in force with another config is refused
    here, an identical one is skipped."""
    if not args.target:
        raise Failed("name a model config file (JSON, a list, or JSONL; - for standard input)", 2)
    configs = parse_registrations(args.target)
    _say_notes("models register", configs)
    for config in configs:                # as sent, under the worker's structural limits
        reason = check_record(topics.MODELS, _wire(config))
        if reason:
            raise Failed(f"the registration of {config.model_id} would be dead-lettered: "
                         f"{reason}; nothing sent")
    kafka = _kafka(args)
    in_force, unchecked = (({}, "--no-check: the registrations in force were not read, so an id "
                            f"registered with another config is refused on {args.prefix}{topics.REJECTED} "
                            "only") if args.no_check else _in_force(kafka, args, "sent"))
    new = []
    for config in configs:
        known = (in_force or {}).get(config.model_id)
        if known is None:
            new.append(config)
        elif known.model_dump(mode="json") != config.model_dump(mode="json"):
            raise Failed(f"{_differs(config, known)}; nothing sent")
    from dpstream.streams.tools.userfiles import Row
    lines = [Row(c.model_id, _wire(c), {"model_id": c.model_id}) for c in new]
    if lines:
        _broker_call(kafka, _produce(kafka, args.prefix + topics.MODELS, lines, Delivery(len(lines))),
                     f"Write topic {args.prefix}{topics.MODELS}")
    for config in configs:
        if config in new:
            print(f"dpstream models: registration of {config.model_id} ({config.kind}) sent; "
                  f"refusals appear on {args.prefix}{topics.REJECTED}")
        else:
            print(f"dpstream models: {config.model_id} is already registered with this config; "
                  "nothing sent")
    if unchecked:
        print(f"dpstream models: note: {unchecked}", file=sys.stderr)
    return 0


def cmd_features(args) -> int:
    """Print a feature declaration suggested from a *public* sample (learners/features.py
    ``suggest_declaration``), ready for a registration's "features"; on stderr, each field
    left out and why, and each declared in a way that may surprise."""
    from dpstream.learners.features import suggest_declaration

    from dpstream.streams.tools.userfiles import (FileError, cell, column_kinds, file_format, read_jsonl,
                                                  read_table)
    fmt = file_format(args.sample, args.format)
    name = "standard input" if args.sample == "-" else args.sample
    records = []
    try:
        if fmt == "jsonl":
            for row in read_jsonl(args.sample):
                if row.error:
                    raise Failed(f"{name} {row.where}: {row.error}")
                if isinstance(row.value, dict):
                    value = row.value
                    records.append(value["features"] if isinstance(value.get("features"), dict) else value)
        else:
            table = read_table(args.sample, fmt)
            kinds = column_kinds(table)
            records = [{k: cell(v, kinds[k]) for k, v in r.items() if k != args.label_column}
                       for r in table]
            if table and args.label_column not in table[0]:
                _no_label_column(args.label_column, records)
    except FileError as err:
        raise Failed(str(err), 2) from None
    if not records:
        raise Failed(f"{name} holds no " + ("JSON objects" if fmt == "jsonl" else "rows"), 2)
    suggestion = suggest_declaration(records, bins=args.bins, binning=args.binning)
    for field, note in suggestion.notes.items():
        print(f"dpstream features: {field[:64]!r}: {note}", file=sys.stderr)
    if not suggestion.fields:
        raise Failed(f"no field of {name} could be declared (each one's reason above)")
    from dpstream.schemas.features import MAX_FIELDS
    if len(suggestion.fields) > MAX_FIELDS:      # a registration would refuse it
        raise Failed(f"{name}: {len(suggestion.fields):,} fields could be declared, and a model declares "
                     f"at most {MAX_FIELDS}: leave columns out of the sample (or hash related ones "
                     "into one categorical field)")
    print(json.dumps([f.model_dump(mode="json", exclude_none=True) for f in suggestion.fields], indent=1))
    print(f"dpstream features: {len(suggestion.fields)} fields from {len(records):,} records of {name}; "
          "the declaration is public: make it from data you may publish", file=sys.stderr)
    return 0


def _no_label_column(label: str, records: list[dict]) -> None:
    """A table without the label column: every column becomes a feature. Said on stderr,
    with the two-valued columns a label may be (``features --sample`` on a file of
    examples declared its 0/1 label a feature, and the model then read it as one)."""
    two = [k for k in records[0] if len({str(r.get(k)) for r in records if r.get(k) is not None}) == 2]
    if two:                              # a sample without labels (the usual, public one) says nothing
        print(f"dpstream features: no column {label[:40]!r} (--label-column): every column is taken "
              f"as a feature; if the label is one of {', '.join(repr(k[:40]) for k in two[:5])}, give "
              "--label-column NAME", file=sys.stderr)


def cmd_acls(args) -> int:
    """Print, apply or remove the ACLs of every principal (streams/tools/acls.py). ``--apply``
    checks the whole plan first (its names, and against the cluster's ACLs: no resource of
    it granted to another tenant's principal, no principal of it holding another tenant's
    rights), creates only what is missing, and takes back what it created if the broker
    refuses one; ``--remove`` deletes what exists of the plan and counts only that."""
    from dpstream.streams.tools.acls import CLUSTER, OPERATIONS, ROLES, overlaps, plan, principals
    from dpstream.streams.worker.faust_seam import create_acls, delete_acls, describe_acls
    if args.apply and args.remove:
        raise Failed("--apply and --remove: give one of them", 2)
    users = {}
    for given in args.user or []:
        role, _, name = given.partition("=")
        if role not in ROLES or not name:
            raise Failed(f"--user {given!r}: expected ROLE=NAME with ROLE one of {', '.join(ROLES)}", 2)
        users[role] = name
    try:
        whole = plan(args.prefix, args.app_id, users)
    except ValueError as err:
        raise Failed(str(err), 2) from None
    acls = whole
    if args.role:
        acls = [a for a in acls if a.principal == principals(args.prefix, users)[args.role]]
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
    names = {v: k for k, v in OPERATIONS.items()}

    async def change():
        async with running(kafka.admin(request_timeout_ms=10_000)) as admin:
            try:
                existing = await describe_acls(admin)
            except PermissionError:       # not a super user: nothing was read or changed
                return None, [], []
            have = {(t, n, p, who, names.get(op)) for t, n, p, who, op in existing}
            if args.remove:
                present = [a for a in acls if a.key in have]
                return present, [], await delete_acls(admin, present)
            problems = overlaps(whole, existing)
            if problems:
                return [], problems, []
            missing = [a for a in acls if a.key not in have]
            errors = await create_acls(admin, missing)
            if errors:                    # no half-applied plan: take back what this run made
                await delete_acls(admin, missing)
            return missing, [], errors
    done, problems, errors = _broker_call(kafka, change(), "Alter the cluster's ACLs")
    if done is None:
        raise Failed(f"not authorized: principal {kafka.principal} may not Describe the cluster's ACLs; "
                     "run `dpstream acls` with an admin's client config (a super user), nothing was changed")
    where = f"topic prefix {args.prefix!r}"
    if problems:
        raise Failed(f"refused, nothing applied: {problems[0]}"
                     + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                     + "; one prefix is one tenant: give this one its own prefix, app id and users "
                     "(--user ROLE=NAME), or remove the other grants first")
    if errors:
        raise Failed(f"{len(errors)} of {len(done)} ACL changes refused, first: {errors[0]}"
                     + ("" if args.remove else "; the others were taken back, nothing applied"))
    if args.remove:
        print(f"dpstream acls: {len(done)} ACLs removed for {where} ({len(acls) - len(done)} of the plan "
              "were not there)", file=sys.stderr)
    else:
        print(f"dpstream acls: {len(done)} ACLs created for {where} ({len(acls) - len(done)} were "
              "already there)", file=sys.stderr)
    return 0


def cmd_schemas(args) -> int:
    from dpstream.schemas import json_schemas
    schemas = json_schemas()
    with out_dir(args.out, private=False) as out, refused_out():   # public files, the --out rules
        out.write_all({f"{name}.json": json.dumps(schema, indent=2).encode() for name, schema in schemas.items()})
    print(f"dpstream schemas: {len(schemas)} JSON Schemas in {out.path}")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("dpstream")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _whole(lo: int, hi: int):
    """An argparse type: a whole number from ``lo`` to ``hi`` (argparse's usage error, exit
    2, otherwise; the value quoted up to 40 characters)."""
    def whole(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = None
        if n is None or not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{text[:40]!r}: a whole number from {lo:,} to {hi:,}")
        return n
    return whole


class _CommandParser(argparse.ArgumentParser):
    """A command's parser: an unknown flag is refused with this command's usage. (argparse
    hands what a subparser does not know back to the top-level parser, whose error shows
    ``dpstream [-h] [--version] COMMAND ...``, which says nothing of the command's flags.)

    An optional positional after an option is taken (``models register --bootstrap-server B
    FILE``, a newcomer's order): argparse (3.11) matches an optional positional only where
    it first meets positionals, so FILE came back unrecognised (bpo-15112)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if len(extras) == 1 and getattr(namespace, "target", False) is None \
                and (extras[0] == "-" or not extras[0].startswith("-")):
            namespace.target, extras = extras[0], []
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    """Every command and flag (each with its help: tests/streams/test_cli_contract.py)."""
    from dpstream.streams.tools.userfiles import FORMATS, LABEL_COLUMN

    from . import topics as topics_command
    ap = argparse.ArgumentParser(
        prog="dpstream", description="Differentially private online learning and private "
        "prediction over Kafka streams. The secret key comes from $DPSTREAM_SECRET_KEY or the "
        "file named by $DPSTREAM_SECRET_KEY_FILE (64+ hex digits), never from a flag.")
    ap.add_argument("--version", action="version", version=f"dpstream {_version()}",
                    help="print the installed version and exit")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=_CommandParser)
    p = sub.add_parser("demo", help="the main job on the embedded runtime (no Kafka)",
                       description="Three models fed generated raw records on the embedded runtime, "
                       "with the baselines a user would compare them with.")
    p.add_argument("--fraud-events", type=int, default=20_000,
                   help="labelled examples of card-fraud and of credit-risk each; every tenth "
                        "card-fraud example comes again as a query, so the default makes 22,000 "
                        "card-fraud events (default: %(default)s)")
    p.add_argument("--queries", type=int, default=5_000,
                   help="queries to credit-risk and to risk-score each (default: %(default)s)")
    p.add_argument("--json", metavar="FILE", help="also write the summary as JSON to this file")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(fn=cmd_demo)

    def inputs(parser, what: str):
        parser.add_argument("--format", choices=FORMATS,
                            help=f"the {what} format (default: by extension: .csv, .parquet; else JSONL)")
        parser.add_argument("--model-id", metavar="ID",
                            help="CSV/Parquet: the model of every row (default: a model_id column"
                                 + (", else the only model of --models)" if what == "files" else ")"))
        parser.add_argument("--label-column", default=LABEL_COLUMN, metavar="NAME",
                            help="CSV/Parquet: the examples' label column, -1/+1, 0/1 or true/false "
                                 "(default: %(default)s)")
        parser.add_argument("--id-column", default="query_id", metavar="NAME",
                            help="CSV/Parquet: the queries' id column, if any, published as query_id on "
                                 "answers (default: %(default)s)")
        parser.add_argument("--privacy-id-column", metavar="NAME",
                            help="CSV/Parquet: the examples' person ID column, for a model whose privacy "
                                 "unit is a person (default: the registration's privacy_unit.id_field); "
                                 "never sent as a feature, never published")
        parser.add_argument("--strict", action="store_true",
                            help="refuse the records (nothing sent or run) when a value has the wrong "
                                 "type for its declared field or a record's field is not declared (a "
                                 "CSV/Parquet column no model declares is not sent: it is only listed)")

    p = sub.add_parser("run", help="the embedded runtime over files (no Kafka)",
                       description="Register the models, then feed the examples and queries through "
                       "the same agents as the worker, and write the outputs as an export directory.")
    p.add_argument("--models", metavar="FILE", help="model configs: a JSON file (object or list) or JSONL")
    p.add_argument("--examples", metavar="FILE", help="labelled examples: JSONL, CSV or Parquet (- for stdin)")
    p.add_argument("--queries", metavar="FILE", help="queries: JSONL, CSV or Parquet (- for stdin)")
    p.add_argument("--out", required=True, help="export directory written (0700, files 0600)")
    p.add_argument("--state", metavar="FILE",
                   help="SQLite file (0600: exact private state) that survives restarts: each input "
                        "is read as a topic, and a rerun skips the records an earlier run read "
                        "(append new records to the same file); it keeps every run's outputs, so "
                        "--out holds the export of every run's records, in the order read; keep it "
                        "in a directory only you can write")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    inputs(p, "files'")
    p.set_defaults(fn=cmd_run)

    def broker(parser):
        parser.add_argument("--bootstrap-server", "--broker", dest="broker", metavar="HOST:PORT",
                            help="bootstrap servers (default: the client config's bootstrap.servers, "
                            f"else $DPSTREAM_KAFKA_BOOTSTRAP, else {DEFAULT_BOOTSTRAP})")
        parser.add_argument("--command-config", "--client-config", dest="client_config", metavar="FILE",
                            help="a Kafka client properties file (security.protocol, sasl.*, ssl.*; "
                            "default: $DPSTREAM_KAFKA_CONFIG)")
        parser.add_argument("--prefix", default="", help="prefix of every topic name (default: none)")

    p = sub.add_parser("worker", help="run a faust worker against a Kafka broker",
                       description="Create the topics if needed, then consume the inputs and write "
                       "the outputs until stopped.")
    broker(p)
    p.add_argument("--partitions", type=int, default=4,
                   help="partitions of every topic, created or found (the inputs, model-events and the "
                        "changelogs must have them); fixes how many workers can share the load "
                        "(default: %(default)s)")
    topics_command.replication_flags(p)
    p.add_argument("--app-id", help="faust app id / consumer group, also the prefix of its changelogs "
                   "(default: the topic prefix + 'dpstream')")
    p.add_argument("--data-dir", metavar="DIR",
                   help="faust's local table files: a directory only you may use, created 0700 "
                        "(default: $XDG_STATE_HOME or ~/.local/state, then dpstream/worker-APP_ID)")
    p.add_argument("--web-port", type=int, help="serve /status/ and /metrics/ on this port")
    p.add_argument("--web-bind", metavar="ADDRESS",
                   help="address those pages listen on (default: $DPSTREAM_WEB_BIND, else "
                        "127.0.0.1, this machine only)")
    p.add_argument("--web-token-file", metavar="FILE",
                   help="require 'Authorization: Bearer TOKEN' on those pages, TOKEN read from FILE "
                        "(yours, mode 600); without it every local user can read them")
    p.add_argument("--loglevel", default="info", help="debug, info, warning or error (default: %(default)s)")
    p.add_argument("--consumer-thread", action="store_true",
                   help="run faust's Kafka consumer in its own thread (faust's default) instead "
                        "of on the worker's event loop (streams/worker/faust_seam.py); a fallback")
    p.add_argument("--latency-metrics", action="store_true",
                   help="export a coarse batch-latency histogram (a timing side channel; off by default)")
    p.set_defaults(fn=cmd_worker)

    p = sub.add_parser("produce", help="send a file of records to an input topic",
                       description="Check every record as the worker will (its form, its model's "
                       "registration, its labels), then send them keyed by model id, with the data "
                       "owner's report on stderr. Interrupted, it says how many were acknowledged; "
                       "--skip that many resumes without sending any twice.")
    broker(p)
    p.add_argument("--topic", required=True, help=f"one of {', '.join(topics.INPUTS)}")
    p.add_argument("--file", required=True, help="JSONL (one record per line), CSV or Parquet; - for stdin")
    p.add_argument("--skip", type=int, default=0, metavar="N",
                   help="skip the first N records (resume: N is what an interrupted run acknowledged)")
    p.add_argument("--no-check", action="store_true",
                   help="send without checking records and model ids locally first")
    inputs(p, "file's")
    p.set_defaults(fn=cmd_produce)

    p = sub.add_parser("consume", help="print a topic's records as they arrive",
                       description="Like Kafka's console consumer: from the end of the topic (what "
                       "arrives from now on) unless --from-beginning, until interrupted, "
                       "--max-messages or --timeout.")
    broker(p)
    p.add_argument("--topic", required=True, help="a dpstream topic (predictions, ledger, ...)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the oldest record (default: the end, as Kafka's console consumer)")
    p.add_argument("--max-messages", "--max", dest="max_messages", type=int, metavar="N",
                   help="stop after N records")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="stop after this many seconds without a new record, at most a year "
                        "(default: follow until interrupted)")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="--timeout in milliseconds, as Kafka's console consumer takes it")
    p.set_defaults(fn=cmd_consume)

    p = sub.add_parser("models", help="register, list or show models",
                       description="register: validate a config file as the worker will and send it "
                       "(an id in force with another config is refused). list / show: the "
                       "registrations in force and the budget their ledger has committed.")
    p.add_argument("action", choices=["register", "list", "show"], help="what to do")
    p.add_argument("target", nargs="?", metavar="FILE|ID",
                   help="register: a model config file (JSON, a list, or JSONL; - for stdin); "
                        "show: the model id")
    broker(p)
    p.add_argument("--timeout", type=float, default=3.0,
                   help="seconds to wait for a record while reading a topic (default: %(default)s)")
    p.add_argument("--no-check", action="store_true",
                   help="register: send without reading the registrations in force (the config "
                        "itself is still validated as the worker will)")
    p.set_defaults(fn=cmd_models)
    p = sub.add_parser("export", help="write the log and output topics to JSONL files",
                       description="Read model-events and the output topics from the start into an "
                       "export directory that replay and audit-report read (--public: the output "
                       "topics only, what an auditor may read).")
    broker(p)
    p.add_argument("--timeout", type=float, default=5.0,
                   help="stop reading a topic after this many seconds without a record (default: %(default)s)")
    p.add_argument("--out", required=True, help="export directory written (0700, files 0600)")
    p.add_argument("--public", action="store_true",
                   help="the output topics only, not the private model-events log: what an auditor "
                        "may read, for `dpstream replay --no-key --dir`")
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("replay", help="recompute every release with the key and compare",
                       description="Exit 0: every release reproduced; 1: mismatches, located; 2: "
                       "wrong key or nothing to audit.")
    p.add_argument("--dir", help="an export directory (default: read the topics from Kafka)")
    broker(p)
    p.add_argument("--timeout", type=float, default=5.0,
                   help="stop reading a topic after this many seconds without a record (default: %(default)s)")
    p.add_argument("--model", action="append", help="only these model ids (repeatable)")
    p.add_argument("--no-key", action="store_true",
                   help="verify only the public record (reads the output topics, not model-events: "
                        "an auditor's rights suffice)")
    p.set_defaults(fn=cmd_replay)
    p = sub.add_parser("audit-report", help="HTML report and PNG figures per model",
                       description="The public report (or, with --internal, the data owner's) of an "
                       "export directory.")
    p.add_argument("--dir", required=True, help="an export directory")
    p.add_argument("--out", required=True, help="directory the report is written to")
    p.add_argument("--no-key", action="store_true", help="skip the keyed replay summary")
    p.add_argument("--internal", action="store_true",
                   help="add exact online mistakes (private statistics; for the data owner only)")
    p.set_defaults(fn=cmd_audit_report)
    p = sub.add_parser("acls", help="print or apply the ACLs of every principal (least privilege)",
                       description="The ACLs each role of one tenant (a --prefix) needs, LITERAL names "
                       "only: print them (the default), --apply or --remove them through the admin "
                       "API, as the admin (the broker's super user, who needs none). Roles and "
                       "rights: docs/security.md.")
    broker(p)
    p.add_argument("--app-id", help="the worker's app id: the prefix + a name (default: the prefix + 'dpstream')")
    p.add_argument("--user", action="append", metavar="ROLE=NAME",
                   help="the user name of a role (worker, producer, querier, consumer, auditor); "
                        "default: the prefix + the role (each prefix is a tenant with its own users)")
    p.add_argument("--role", choices=["worker", "producer", "querier", "consumer", "auditor"],
                   help="only this role's ACLs (the admin has none: it is the broker's super user)")
    p.add_argument("--apply", action="store_true", help="create them through the admin API")
    p.add_argument("--remove", action="store_true", help="delete them through the admin API")
    p.add_argument("--print", dest="print_only", action="store_true", help="only print them (the default)")
    p.set_defaults(fn=cmd_acls)
    topics_command.add_parser(sub, broker)
    p = sub.add_parser("features", help="suggest a feature declaration from a public sample",
                       description="Print a declaration for a registration's \"features\"; on "
                       "stderr, every field left out and why. The declaration is public: make it "
                       "from data you may publish.")
    p.add_argument("--sample", required=True,
                   help="raw records (or examples with 'features'): JSONL, CSV or Parquet; - for stdin")
    p.add_argument("--format", choices=FORMATS, help="the sample's format (default: by extension)")
    p.add_argument("--label-column", default=LABEL_COLUMN, metavar="NAME",
                   help="CSV/Parquet: a label column, not a feature (default: %(default)s)")
    p.add_argument("--bins", type=_whole(2, 256), default=8,
                   help="bins per number, 2 to 256 (default: %(default)s)")
    p.add_argument("--binning", choices=["equal_width", "quantile"], default="equal_width",
                   help="bins of equal width, or between the sample's quantiles (default: %(default)s)")
    p.set_defaults(fn=cmd_features)
    p = sub.add_parser("schemas", help="write JSON Schemas of every event",
                       description="One JSON Schema file per record type (ModelConfig, "
                       "LabeledExample, Query, Prediction, ...).")
    p.add_argument("--out", required=True, help="directory to write them to")
    p.set_defaults(fn=cmd_schemas)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd != "worker":       # the client library's own error lines: the command says it once
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        from dpstream.streams.worker.kafka import quiet_tls_shutdown
        quiet_tls_shutdown()
    try:
        return args.fn(args)
    except Failed as err:
        print(f"dpstream {args.cmd}: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:      # Ctrl-C: a command that kept something partial says so itself
        print(f"dpstream {args.cmd}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader left (``| head``): stop quietly, as a tool killed by SIGPIPE does
        # (Python's documented recipe: point stdout at devnull so the exit flush is silent)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
