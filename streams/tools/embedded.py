"""The embedded runtime: the same agents as the faust worker, over in-memory records
or JSONL files, with state in a dict or an SQLite file. No Kafka needed.

Input order is the order of ``records``; each record gets the offset it would have in
a one-partition topic. The model-events log is kept in memory and its offsets play the
role of the Kafka log's. With an SQLite state (``run --state``) the log and the output
topics are kept in the file too, as a broker keeps its topics, so the export of a
rerun holds every run's records and replays on its own (``SqliteState.kept_outputs``).
"""
from __future__ import annotations

import asyncio
import fcntl
import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, MutableMapping
from pathlib import Path

from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord
from dpstream.agents.sequencer import MODEL_EVENTS, sequence_batch
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.worker.topics import ANSWERS, copies


class StateFileError(ValueError):
    """A ``--state`` path that cannot hold the state (the message says why, in one line)."""


class SqliteState(MutableMapping):
    """A persistent mapping of JSON values (embedded runs that survive restarts), and the
    records earlier runs wrote (``kept_outputs``, ``keep_outputs``).

    The file holds exact internal state (true counts, noise buffers, online mistakes) and
    the model-events log (validated examples): as private as the examples, so it is
    created 0600 whatever the umask, and an existing file is used only if it is a regular
    file of this user's, with one link, that no one else may read. Its directory must be
    one only the caller (or root) can write, every directory on the way to it judged as
    ``--out``'s are: SQLite makes side files next to it by name (``NAME-journal``, which
    holds pages of the state while a run writes), and another user who made that name
    first could read them. It grows with the stream, as a topic does. A file whose kept
    records do not match its state (made by an older dpstream, or edited) is refused:
    its export would not replay."""

    TABLES = {"state", "outputs"}

    def __init__(self, path: str | Path):
        import os
        import stat

        from dpstream.streams.tools.outdir import UnsafeOut, check_private_home
        path = str(path)
        if not path.strip():
            raise StateFileError("an empty path: give the state file")
        try:
            resolved = str(check_private_home(Path(path)))   # absolute: ":memory:" is a file name here
        except UnsafeOut as err:
            raise StateFileError(f"{path}: {err.problem}; keep the state in a directory only you can "
                                 "write") from None
        path = resolved
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as err:
            raise StateFileError(f"{path}: {err.strerror.lower()}") from None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateFileError(f"{path} is not a regular file")
        if st.st_uid != os.getuid():
            raise StateFileError(f"{path} belongs to another user")
        if st.st_mode & 0o077:
            raise StateFileError(f"{path} may be read by others (mode {stat.S_IMODE(st.st_mode):o}): it "
                                 "holds exact private state; chmod 600 it")
        if st.st_nlink != 1:
            raise StateFileError(f"{path} has {st.st_nlink} hard links: another name reaches the same "
                                 "private state; give a file of its own")
        try:
            self.db = sqlite3.connect(path)
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables - self.TABLES:          # another program's database: not written into
                raise StateFileError(f"{path} is not a dpstream state file (it holds other tables)")
            self.db.execute("CREATE TABLE IF NOT EXISTS state (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
            # the records runs wrote, in order: topic, JSON value (the rowid is the order)
            self.db.execute("CREATE TABLE IF NOT EXISTS outputs (topic TEXT NOT NULL, v TEXT NOT NULL)")
            self._kept = self._read_kept(path)
        except sqlite3.DatabaseError as err:
            raise StateFileError(f"{path} is not a dpstream state file ({err})") from None
        # one run at a time: a second run on the same state read the first one's offsets
        # half-way and wrote an empty export, exit 0 (the lock goes with the process)
        self._lock = open(path, "rb")
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self.db.close()
            raise StateFileError(f"{path} is in use by another run") from None

    def __getitem__(self, key):
        row = self.db.execute("SELECT v FROM state WHERE k = ?", (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        return json.loads(row[0])

    def __setitem__(self, key, value):
        self.db.execute("INSERT OR REPLACE INTO state (k, v) VALUES (?, ?)", (key, json.dumps(value)))

    def __delitem__(self, key):
        self.db.execute("DELETE FROM state WHERE k = ?", (key,))

    def __iter__(self):
        return iter([r[0] for r in self.db.execute("SELECT k FROM state")])

    def __len__(self):
        return self.db.execute("SELECT COUNT(*) FROM state").fetchone()[0]

    def _read_kept(self, path: str) -> tuple[list[dict], dict[str, list]]:
        """The kept records, checked against the state: as many model events as the state's
        log offset says, the embedded bookkeeping well-formed (else StateFileError)."""
        damaged = (f"{path} is damaged or was made by an older dpstream ({{}}): its export would "
                   "not replay; give a new --state")
        log, outputs = [], defaultdict(list)
        try:
            for topic, v in self.db.execute("SELECT topic, v FROM outputs ORDER BY rowid"):
                (log if topic == MODEL_EVENTS else outputs[topic]).append(json.loads(v))
            offset = self.get("embedded/log_offset", -1)
            reads = [self[k] for k in self if k.startswith("embedded/read/")]
            positions = [self[k] for k in self if k.startswith("src/")]
        except (ValueError, TypeError):
            raise StateFileError(damaged.format("a record that is not JSON")) from None
        if type(offset) is not int or offset + 1 != len(log):
            raise StateFileError(damaged.format(f"it keeps {len(log):,} model events, its state says "
                                                f"{offset + 1 if type(offset) is int else '?'}"))
        if not all(isinstance(r, dict) and r.get("offset") == i for i, r in enumerate(log)):
            raise StateFileError(damaged.format("a kept model event is not where its offset says"))
        if not all(type(p) is int and p >= -1 for p in positions):
            raise StateFileError(damaged.format("an input position is not a whole number"))
        if not all(isinstance(r, dict) and type(r.get("n")) is int and r["n"] >= 0
                   and isinstance(r.get("mac"), str) for r in reads):
            raise StateFileError(damaged.format("what earlier runs read is not recorded as it should be"))
        return log, outputs

    def kept_outputs(self) -> tuple[list[dict], dict[str, list]]:
        """The model-events log and the output topics' records earlier runs kept, in order."""
        return self._kept

    def keep_outputs(self, log: list[dict], outputs: dict[str, list]) -> None:
        """Append a batch's log and output records (``EmbeddedRuntime`` calls it after each
        batch; written with the state at ``commit``)."""
        rows = [(MODEL_EVENTS, json.dumps(r)) for r in log]
        rows += [(topic, json.dumps(v)) for topic, values in outputs.items() for v in values]
        self.db.executemany("INSERT INTO outputs (topic, v) VALUES (?, ?)", rows)

    def commit(self) -> None:
        self.db.commit()

    def close(self) -> None:
        """Close the database and release the run's lock."""
        self.db.close()
        self._lock.close()


class EmbeddedRuntime:
    """The sequencer and the processor over records fed in order, in batches of up to
    ``BATCH`` records, as the worker applies a fetch: the sequencer validates a batch and
    appends its log records, then the processor applies them through the same batch
    kernels. Outputs per topic are in the order a one-record-at-a-time run gives them."""

    BATCH = 500

    def __init__(self, rng: KeyedRandomness, state: MutableMapping | None = None):
        self.rng = rng
        self.state = {} if state is None else state
        self.outputs: dict[str, list] = defaultdict(list)
        self.log_offset = self.state.get("embedded/log_offset", -1)
        self.processor = Processor(rng, self.state, self._emit)
        self._pending: list[tuple[str, dict]] = []
        self.offsets: dict[str, int] = defaultdict(lambda: -1)
        self.log: list[dict] = []           # the model-events log, as export writes it

    async def _emit(self, topic: str, key, value: dict) -> None:
        if topic == MODEL_EVENTS:
            self._pending.append((key, value))
        else:
            self.outputs[topic].append(value)
            if copies(topic, value):             # a query's answer, as the worker publishes it
                self.outputs[ANSWERS].append(value)

    def _record(self, topic: str, payload: bytes | str | dict, key: str | None) -> RawRecord:
        if isinstance(payload, dict):
            payload = json.dumps(payload)
        if isinstance(payload, str):
            payload = payload.encode()
        self.offsets[topic] += 1
        return RawRecord(topic, 0, self.offsets[topic], key.encode() if key else None, payload)

    async def feed(self, topic: str, payload: bytes | str | dict, key: str | None = None) -> None:
        """One input record on ``topic`` (models, examples or queries)."""
        await self._apply([self._record(topic, payload, key)])

    async def feed_all(self, items: Iterable[tuple[str, bytes | str | dict]], progress=None) -> None:
        """Input records (topic, payload) in order, ``BATCH`` at a time; ``progress(n)``
        after each batch of n. Between batches the task yields to the event loop: a batch of
        cheap events never suspends (it runs on the loop's thread), and a cancellation (the
        Ctrl-C of ``asyncio.run``) takes effect only where the task suspends; before, Ctrl-C
        on ``dpstream run`` or ``demo`` waited for the whole input."""
        batch: list[RawRecord] = []
        for topic, payload in items:
            batch.append(self._record(topic, payload, None))
            if len(batch) >= self.BATCH:
                await self._apply(batch)
                if progress is not None:
                    progress(len(batch))
                batch = []
                await asyncio.sleep(0)
        if batch:
            await self._apply(batch)
            if progress is not None:
                progress(len(batch))

    async def _apply(self, records: list[RawRecord]) -> None:
        log_from, outputs_from = len(self.log), {t: len(v) for t, v in self.outputs.items()}
        await self._sequence_and_process(records)
        keep = getattr(self.state, "keep_outputs", None)     # an SQLite state keeps them with it
        if keep is not None:
            keep(self.log[log_from:], {t: v[outputs_from.get(t, 0):] for t, v in self.outputs.items()})

    async def _sequence_and_process(self, records: list[RawRecord]) -> None:
        await sequence_batch(records, self.state, self._emit, rng=self.rng)
        appended = []
        for mkey, value in self._pending:
            self.log_offset += 1
            self.log.append({"partition": 0, "offset": self.log_offset, "value": value})
            appended.append(RawRecord(MODEL_EVENTS, 0, self.log_offset, mkey.encode(), b"", body=value))
        self._pending.clear()
        self.state["embedded/log_offset"] = self.log_offset
        if appended:
            await self.processor.handle_batch(appended)
