"""What a worker shows about itself: a status summary per model and Prometheus metrics.

Neither exposes features, labels, keys or noise: the status view reads only counters
and ledger sums from each model's ``head`` record; the metrics count events per topic,
rejected inputs and budget spent per model.

Where they are served: the worker's web pages (``/status``, ``/metrics``, and faust's own
``/router``) show live per-model event counts, the business volume of every model. They
listen on 127.0.0.1 unless told otherwise (``web_bind``: ``--web-bind ADDRESS``, else
$DPSTREAM_WEB_BIND). The container image sets DPSTREAM_WEB_BIND=0.0.0.0 (a container's
loopback is reachable from nothing), and docker-compose publishes the port on the host's
127.0.0.1 only.

Who may read them: other local users are not trusted (docs/security.md), and every one of
them can connect to 127.0.0.1. With ``--web-token-file FILE`` (``web_token``: the
caller's or root's file, readable by its owner only) every page answers 401 unless the
request carries ``Authorization: Bearer <the file's token>``, compared in constant time
(``token_middleware``, an aiohttp middleware given to faust's ``web_application_options``,
so faust's own pages are covered too). Without it the pages are open to whoever reaches
the port, and the worker says so when it starts (``web_warning``), as it does for an
address beyond loopback.

Timing is a side channel: how long a batch takes depends on the data (an update, an LP
refit after a hard query, a training window), so a fine-grained latency histogram can
tell an observer when private work happened. It is off by default; ``--latency-metrics``
turns on a coarse one (buckets 10 ms, 100 ms, 1 s, 10 s) for operators who accept that.
"""
from __future__ import annotations

import contextlib
import errno
import hmac
import logging
import re
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from dpstream.agents.kinds import kind
from dpstream.mechanisms.accounting import spent
from dpstream.schemas import ModelConfig


WEB_BIND = "127.0.0.1"
WEB_BIND_ENV = "DPSTREAM_WEB_BIND"


def web_bind(given: str | None = None, environ=None) -> str:
    """The address the worker's web pages listen on: ``given`` (--web-bind), else
    $DPSTREAM_WEB_BIND, else 127.0.0.1 (module docstring)."""
    import os
    environ = os.environ if environ is None else environ
    return (given or environ.get(WEB_BIND_ENV) or WEB_BIND).strip()


def web_port_problem(bind: str, port: int) -> str | None:
    """Why the worker's pages could not listen on ``bind``:``port``, found before the worker
    connects (faust's web server would otherwise fail mid-start with a traceback): the
    address's every resolved socket is bound and closed again, as aiohttp's ``TCPSite``
    binds them (``loop.create_server``: getaddrinfo with AI_PASSIVE, SO_REUSEADDR on
    POSIX, docs.python.org/3/library/asyncio-eventloop.html#asyncio.loop.create_server).
    None when it can; a port taken between this check and the start still fails there."""
    import socket
    if not 0 <= port <= 65535:
        return f"--web-port {port}: a TCP port is 0 to 65535"
    try:
        infos = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as err:
        return (f"--web-bind {bind[:64]!r}: not an address of this machine ({getattr(err, 'strerror', err)}): "
                "give one of its addresses, or 127.0.0.1")
    for family, kind_, proto, _, address in infos:
        with socket.socket(family, kind_, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return (f"--web-port {port}: {address[0]}:{port} is in use (another worker's "
                            "pages?): give another --web-port, or stop what listens there")
                return (f"--web-bind {bind[:64]!r}: cannot listen on {address[0]}:{port} ({err.strerror}): "
                        "give an address of this machine, or 127.0.0.1")
    return None


WEB_TOKEN_MIN = 16          # characters: secrets.token_urlsafe(32) gives 43


def web_token(path: str) -> str:
    """The token in ``path`` (--web-token-file), stripped of surrounding white space.
    ValueError, in one line naming the file and the fix, when another user could read or
    change it (``kafka.trust_problem`` with ``secret``), or when it is not one word of at
    least WEB_TOKEN_MIN printable ASCII characters."""
    from .kafka import read_trusted
    make = "(umask 077; python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > FILE)"
    try:
        data, problem = read_trusted(path, secret=True)
    except OSError as err:
        raise ValueError(f"--web-token-file {path}: {err.strerror}: make one with {make}") from None
    if problem:
        raise ValueError(f"--web-token-file {problem}")
    token = data.strip()
    if len(token) < WEB_TOKEN_MIN or not re.fullmatch(rb"[\x21-\x7e]+", token):
        raise ValueError(f"--web-token-file {path}: not a token of {WEB_TOKEN_MIN} or more printable "
                         f"ASCII characters without spaces (it is not shown): make one with {make}")
    return token.decode("ascii")


def token_middleware(token: str):
    """An aiohttp middleware that answers 401 to every request without ``Authorization:
    Bearer <token>``; the token is compared in constant time (``hmac.compare_digest`` on
    keyed MACs under a key drawn for this process, so neither its length nor any plain
    hash of it is ever computed where a timing could show it)."""
    import secrets

    from aiohttp import web
    key = secrets.token_bytes(32)
    expected = hmac.new(key, token.encode(), "sha256").digest()

    @web.middleware
    async def require_token(request, handler):
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        digest = hmac.new(key, given.strip().encode("utf-8", "surrogateescape"), "sha256").digest()
        if scheme.lower() != "bearer" or not hmac.compare_digest(digest, expected):
            return web.Response(status=401, text="a token is required: Authorization: Bearer <token>\n",
                                headers={"WWW-Authenticate": 'Bearer realm="dpstream"'})
        return await handler(request)
    return require_token


def web_warning(bind: str, port: int, token: bool) -> str | None:
    """What a worker whose pages listen on ``bind``:``port`` says when it starts about who
    can read them (module docstring); None with a token on a loopback address."""
    if not token:
        who = ("anyone who reaches that port" if exposed(bind) else "every user of this machine")
        return (f"the status and metrics pages on {bind}:{port} have no authentication: {who} can read "
                "per-model event counts (--web-token-file FILE requires a token"
                + (", --web-bind 127.0.0.1 keeps them on this machine)" if exposed(bind) else ")"))
    if exposed(bind):
        return (f"the status and metrics pages on {bind}:{port} take a token over plain HTTP: the token "
                "and the counts cross the network unencrypted (serve them through a TLS proxy, or "
                "--web-bind 127.0.0.1)")
    return None


def exposed(bind: str) -> bool:
    """Whether pages bound to ``bind`` can be reached from other machines (anything but a
    loopback address or ``localhost``)."""
    import ipaddress
    if bind == "localhost":
        return False
    try:
        return not ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return True                       # a host name: whatever it resolves to


def status_of(config: dict, head: dict) -> dict:
    """Public summary of one model from its config and head record: the fields every
    kind has, then the kind's own (``Handler.status``)."""
    cfg = ModelConfig.model_validate(config)
    budget = cfg.budget
    out = {"kind": cfg.kind, "dimension": cfg.dimension, "events": head.get("n", 0),
           "budget_epsilon": budget.epsilon, "budget_delta": budget.delta,
           "privacy_unit": cfg.unit}
    fields, ledger = kind(cfg.kind).status(cfg, head)
    out.update(fields)
    total = spent(ledger)
    out["spent_epsilon"], out["spent_delta"] = total.epsilon, total.delta
    out["left_epsilon"] = max(0.0, budget.epsilon - out["spent_epsilon"])
    return out


def model_partition(model_id: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record keyed by ``model_id``
    (murmur2 of the key bytes, as aiokafka's DefaultPartitioner, which the worker's
    producer uses for every model-keyed record)."""
    from aiokafka.partitioner import murmur2
    return (murmur2(model_id.encode()) & 0x7FFFFFFF) % partitions


def collect_status(state, active=None) -> dict:
    """Status of every model whose head is in ``state``; with ``active`` (a predicate on
    model ids), only the models this worker actively owns, not standby replicas."""
    models = {}
    for key in list(state.keys()):
        k = key.decode() if isinstance(key, bytes) else key
        if k.startswith("model/") and k.endswith("/head"):
            model_id = k[len("model/"):-len("/head")]
            if active is not None and not active(model_id):
                continue
            cfg = state.get(f"model/{model_id}/config".encode() if isinstance(key, bytes)
                            else f"model/{model_id}/config")
            if cfg is not None:
                models[model_id] = status_of(cfg, state[key])
    return models


class RepeatFilter(logging.Filter):
    """Lets a repeated log line through once per ``window`` seconds: a broker outage made
    aiokafka log the same connection error tens of thousands of times. The first line
    after a quiet spell says how many were held back."""

    def __init__(self, window: float = 10.0):
        super().__init__()
        self.window = window
        self.seen: dict[tuple, list] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        entry = self.seen.get(key)
        if entry is not None and now - entry[0] < self.window:
            entry[1] += 1
            return False
        held = entry[1] if entry else 0
        self.seen[key] = [now, 0]
        if len(self.seen) > 1000:
            self.seen.clear()
        if held:
            record.msg = f"{record.msg} (and {held} more like it in the last {self.window:g}s)"
        return True


# Lines aiokafka and faust log at ERROR while a consumer group forms on a fresh broker
# (the group coordinator is elected after the first join request): expected at start.
STARTUP_NOISE = ("GroupCoordinatorNotAvailable", "Marking the coordinator dead",
                 "Heartbeat session expired", "Timer commit is overlapping", "coordinator dead",
                 "NotCoordinator", "Heartbeat failed")
STARTUP_WINDOW = 90.0        # seconds after the worker starts in which those lines are expected
# aiokafka's metadata fetch can race the worker's own creation of its tables' changelogs
# (faust creates them at start): "Topic dpstream-model-state-changelog not found in
# cluster metadata" once, seen in CI on a loaded machine. Only for a changelog topic; a
# missing input topic stays an ERROR.
OWN_TOPIC_NOISE = "not found in cluster metadata"


class StartupNoise(logging.Filter):
    """Logs the lines a fresh consumer group always produces at start (STARTUP_NOISE) at
    INFO for the first STARTUP_WINDOW seconds, so that ERROR means something is wrong;
    after that they keep their level (a coordinator lost mid-run is worth an ERROR)."""

    def __init__(self, window: float = STARTUP_WINDOW):
        super().__init__()
        self.until = time.monotonic() + window

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and time.monotonic() < self.until:
            text = str(record.msg)
            if any(n in text for n in STARTUP_NOISE) or (
                    record.args and any(n in str(a) for a in record.args for n in STARTUP_NOISE)) or (
                    OWN_TOPIC_NOISE in text and isinstance(record.args, tuple) and len(record.args) == 1
                    and str(record.args[0]).endswith("-changelog")):
                record.levelno, record.levelname = logging.INFO, "INFO"
        return True


# What aiokafka logs when the broker closes a connection that it then opens again at
# once: a secured broker closes every SASL session after connections.max.reauth.ms
# (scripts/kafka.sh sets 60 s, so that a revoked password's sessions end), and aiokafka,
# which does not log in again on an open connection, reconnects. Two ERROR lines a
# minute from a healthy worker; a broker really gone says so in other lines ("Unable
# connect to ..."), which stay ERROR.
RELOGIN_NOISE = ("Failed fetch messages from %s: %s", "Heartbeat send request failed: %s. Will retry.")
CLOSED = re.compile(r"Connection at \S+ closed")


class ReloginNoise(logging.Filter):
    """Logs aiokafka's lines for a connection the broker closed (RELOGIN_NOISE, with
    "Connection at ... closed" as the reason) at INFO: the next request reconnects."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (record.levelno >= logging.WARNING and record.name.startswith("aiokafka")
                and record.msg in RELOGIN_NOISE and record.args
                and any(CLOSED.search(str(a)) for a in record.args)):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def quiet_startup_logs(root: logging.Logger, level: int) -> None:
    """The worker's log policy, set up with the root logger: the libraries' INFO chatter
    off (aiokafka, faust and mode log at WARNING and above unless the worker runs at
    DEBUG), expected start-up noise and a reconnect after the broker closed a session at
    INFO (``StartupNoise``, ``ReloginNoise``), and a line an outage repeats tens of
    thousands of times once per 10 s (``RepeatFilter``). The filters sit on the root's
    handlers, which every library logger's records reach."""
    if level > logging.DEBUG:
        for name in ("aiokafka", "faust", "mode"):
            logging.getLogger(name).setLevel(logging.WARNING)
    noise, relogin, repeat = StartupNoise(), ReloginNoise(), RepeatFilter()
    for handler in root.handlers:
        handler.addFilter(noise)
        handler.addFilter(relogin)
        handler.addFilter(repeat)


class Metrics:
    def __init__(self, latency: bool = False):
        self.registry = CollectorRegistry()
        self.events_in = Counter("dpstream_events_in", "input records handled", ["topic"],
                                 registry=self.registry)
        self.events_out = Counter("dpstream_events_out", "records emitted", ["topic"],
                                  registry=self.registry)
        self.gap_records = Counter("dpstream_gap_records", "records the runtime skipped and the "
                                   "agents re-read from the log", ["topic"], registry=self.registry)
        self.rejected = Counter("dpstream_rejected", "inputs dead-lettered", registry=self.registry)
        self.latency = Histogram("dpstream_processing_seconds", "time to handle one batch of records "
                                 "(coarse, opt-in: a timing side channel)", ["stage"],
                                 registry=self.registry, buckets=(0.01, 0.1, 1, 10)) if latency else None
        self.spent = Gauge("dpstream_budget_spent_epsilon", "epsilon spent (current epoch)",
                           ["model_id"], registry=self.registry)

    def observe_emit(self, topic: str, value: dict) -> None:
        self.observe_emits(((topic, None, value),))

    def observe_emits(self, items) -> None:
        """Count ``(topic, key, value)`` outputs and keep each model's last spent epsilon
        (a batch costs one counter update per topic, one gauge update per model)."""
        counts: dict[str, int] = {}
        spent: dict[str, float] = {}
        for topic, _, value in items:
            counts[topic] = counts.get(topic, 0) + 1
            if topic == "ledger":
                spent[value["model_id"]] = value["spent_epsilon"]
            elif topic == "predictions":      # also after a restart, before the next charge
                spent[value["model_id"]] = value["epsilon_spent"]
        for topic, n in counts.items():
            self.events_out.labels(topic).inc(n)
        self.rejected.inc(counts.get("rejected", 0))
        for model_id, eps in spent.items():
            self.spent.labels(model_id).set(eps)

    def timer(self, stage: str):
        return _Timer(self.latency.labels(stage)) if self.latency is not None else contextlib.nullcontext()

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _Timer:
    def __init__(self, hist):
        self.hist = hist

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.hist.observe(time.perf_counter() - self.t0)
