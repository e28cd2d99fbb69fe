"""How dpstream connects to Kafka: one settings object that every client is made from.

The worker (through faust), its outputs producer, its log re-reads and tail checks, and
every CLI command (produce, consume, models, export, replay, acls) build their aiokafka
clients here, so the broker address and the connection's security reach all of them
the same way.

Security is configured the way Kafka users configure any client: a client properties
file with Kafka's standard names (``--client-config FILE`` or $DPSTREAM_KAFKA_CONFIG),
and environment variables for secrets:

    security.protocol=SASL_SSL                  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    sasl.mechanism=SCRAM-SHA-512                # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    sasl.username=worker                        # or a Java client's sasl.jaas.config line
    sasl.password=...                           # or $DPSTREAM_KAFKA_SASL_PASSWORD
    ssl.ca.location=/etc/dpstream/ca.pem        # PEM (a Java truststore: export it to PEM)
    ssl.certificate.location=client.pem         # optional client certificate (mutual TLS)
    ssl.key.location=client.key                 # its key; ssl.key.password or $DPSTREAM_KAFKA_SSL_KEY_PASSWORD
    ssl.endpoint.identification.algorithm=https # the default: the broker's name is checked

A client config says where the records go and how they are protected, so only the caller
and root may change it (ssh's StrictModes for ~/.ssh/config): the file, and every TLS file
it names (CA, certificate, key), must belong to the caller or root, be writable by no one
else, and be reached through directories only the caller or root may change, by the rule
of ``--out``'s parents (streams/worker/paths.py: owned by the caller or root, sticky
where others may write, no symbolic link of another user on the way; ``trust_problem``).
Otherwise another local user could point ``produce`` at their own listener in the clear,
or add their CA. A file that holds a password, and the client's key, must also be
readable by its owner only (as ssh insists for its keys); secrets never come from a flag
(flags land in shell history and ``ps``), and they never appear in this object's repr, in
logs, in ``/status/`` or in error messages.

A config never means less security than it says (docs/security-clients.md; issue 41):

* ``security.protocol`` is never guessed. Kafka's Java client and librdkafka both
  default to PLAINTEXT and infer nothing from other settings, so a file with any
  ``sasl.*`` or ``ssl.*`` setting but no ``security.protocol`` is refused (it would have
  connected unencrypted and unauthenticated), as is a ``sasl.*`` setting under a
  protocol without SASL or an ``ssl.*`` setting under one without TLS (ignored
  credentials, a CA that checks nothing).
* ``sasl.mechanism`` has no default here. Both clients default to GSSAPI (Kerberos;
  Kafka's SaslConfigs.DEFAULT_SASL_MECHANISM, librdkafka's CONFIGURATION.md), which
  dpstream does not speak; defaulting to PLAIN instead would send the password itself
  to whatever answers. A SASL config without one is refused, naming the choices.
* ``ssl.endpoint.identification.algorithm``: ``https`` (the default, any case, as JSSE
  takes it) checks the broker's name; the empty value turns the check off, Kafka's
  documented way (KIP-294; Kafka's security docs, "Host Name Verification"), and every
  command and worker that reads such a config warns that it is off. Anything else is
  refused: in the Java client an unknown algorithm fails the handshake, so ``none``
  (librdkafka's spelling), ``http`` or a typo must not quietly mean "off".
* ``sasl.mechanism=PLAIN`` under ``SASL_PLAINTEXT`` sends the password itself unencrypted:
  taken (a broker may offer nothing else), with a warning at every command and worker.
"""
from __future__ import annotations

import asyncio

import logging
import os
import re
import stat
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .tls_refusal import tls_refusal

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# what the resolver says (glibc, musl, macOS) when a bootstrap host name has no address
UNRESOLVED = re.compile(r"Name or service not known|Temporary failure in name resolution|"
                        r"nodename nor servname|No address associated with hostname|Errno -[235]\]")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KNOWN = {"bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
         "sasl.username", "sasl.password", "sasl.jaas.config", "ssl.ca.location",
         "ssl.truststore.location", "ssl.truststore.type", "ssl.certificate.location",
         "ssl.key.location", "ssl.key.password", "ssl.endpoint.identification.algorithm",
         "client.id"}


SASL_PASSWORD_ENV, KEY_PASSWORD_ENV = "DPSTREAM_KAFKA_SASL_PASSWORD", "DPSTREAM_KAFKA_SSL_KEY_PASSWORD"
NO_HOSTNAME_CHECK = ("warning: hostname verification is OFF ({where}: ssl.endpoint.identification."
                     "algorithm is empty): anyone holding a certificate from a CA you trust can "
                     "pose as the broker; remove the line to verify the broker's name")
PLAIN_IN_CLEAR = ("warning: the password crosses the network in the clear ({where}: sasl.mechanism=PLAIN "
                  "over security.protocol=SASL_PLAINTEXT): anyone on the path reads it; use SASL_SSL, "
                  "or SCRAM-SHA-512 if the broker offers it")
log = logging.getLogger("dpstream.kafka")


class ClientConfigError(ValueError):
    """A client configuration that cannot work (the message names the setting, never a secret)."""


@dataclass(frozen=True)
class Kafka:
    """Where the brokers are and how to talk to them."""
    bootstrap: str = DEFAULT_BOOTSTRAP
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    def __post_init__(self):
        if self.security_protocol not in PROTOCOLS:
            raise ClientConfigError(f"security.protocol={self.security_protocol!r}: one of {', '.join(PROTOCOLS)}")
        if self.sasl:
            if self.sasl_mechanism not in MECHANISMS:
                raise ClientConfigError(f"sasl.mechanism={self.sasl_mechanism!r}: one of {', '.join(MECHANISMS)}")
            if not self.username or self.password is None:
                raise ClientConfigError("SASL needs sasl.username and a password (sasl.password in a "
                                        "0600 file, or $DPSTREAM_KAFKA_SASL_PASSWORD)")
        if (self.cert_file is None) != (self.key_file is None):
            raise ClientConfigError("a client certificate needs both ssl.certificate.location and ssl.key.location")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL")

    @property
    def tls(self) -> bool:
        return self.security_protocol.endswith("SSL")

    @property
    def principal(self) -> str:
        """The principal the broker will see (for messages): ``User:<name>``."""
        if self.sasl:
            return f"User:{self.username}"
        return "User:ANONYMOUS" if not self.tls or self.cert_file is None else "the client certificate's subject"

    @classmethod
    def from_settings(cls, bootstrap: str | None = None, config_file: str | None = None,
                      environ=None) -> "Kafka":
        """Settings from a client properties file (--client-config / $DPSTREAM_KAFKA_CONFIG)
        and secrets from the environment. The brokers: ``bootstrap`` (--broker), else the
        file's bootstrap.servers (a file describes one cluster: its CA and users belong
        to it), else $DPSTREAM_KAFKA_BOOTSTRAP, else 127.0.0.1:9092."""
        environ = os.environ if environ is None else environ
        config_file = config_file or environ.get("DPSTREAM_KAFKA_CONFIG")
        props = {}
        if config_file:
            try:
                data, problem = read_trusted(config_file)
            except OSError as err:
                raise ClientConfigError(f"cannot read the client config {config_file}: "
                                        f"{err.strerror}") from None
            if problem:
                raise ClientConfigError(f"client config {problem}")
            props = read_properties(config_file, data)
        bootstrap = bootstrap or props.get("bootstrap.servers") or \
            environ.get("DPSTREAM_KAFKA_BOOTSTRAP") or DEFAULT_BOOTSTRAP
        username, password = props.get("sasl.username"), props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas:
            found = _jaas_options(jaas, config_file or "the client config")
            username, password = found.get("username", username), found.get("password", password)
        if (password or props.get("ssl.key.password")) and config_file:
            mode = os.stat(config_file).st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ClientConfigError(f"{config_file} holds a password and others can read it: "
                                        f"chmod 600 {config_file}")
        password = environ.get(SASL_PASSWORD_ENV, password)
        ca = props.get("ssl.ca.location")
        if ca is None and props.get("ssl.truststore.location"):
            if props.get("ssl.truststore.type", "").upper() != "PEM":
                raise ClientConfigError("ssl.truststore.location: only a PEM truststore is read "
                                        "(ssl.truststore.type=PEM; export a JKS or PKCS12 one with keytool)")
            ca = props["ssl.truststore.location"]
        where = config_file or "the client config"
        protocol = _protocol(props, where)
        check_hostname = _hostname_check(props, where)
        if protocol.endswith("SSL") and not check_hostname:
            log.warning(NO_HOSTNAME_CHECK.format(where=where))
        mechanism = _mechanism(props, protocol, where)
        if protocol == "SASL_PLAINTEXT" and mechanism == "PLAIN":
            log.warning(PLAIN_IN_CLEAR.format(where=where))
        return cls(bootstrap=bootstrap,
                   security_protocol=protocol,
                   sasl_mechanism=mechanism,
                   username=username, password=password, ca_file=ca,
                   cert_file=props.get("ssl.certificate.location"),
                   key_file=props.get("ssl.key.location"),
                   key_password=environ.get(KEY_PASSWORD_ENV, props.get("ssl.key.password")),
                   check_hostname=check_hostname)

    def ssl_context(self):
        """The TLS context: the CA bundle (else the system's), an optional client
        certificate, hostname verification unless turned off explicitly."""
        import ssl
        for setting, path, secret in (("ssl.ca.location", self.ca_file, False),     # judged before
                                      ("ssl.certificate.location", self.cert_file, False),  # loaded
                                      ("ssl.key.location", self.key_file, True)):
            if path and (problem := trust_problem(path, secret=secret)):
                raise ClientConfigError(f"{setting}: {problem}")
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
        except OSError as err:             # ssl.SSLError is one: a file OpenSSL cannot read
            raise ClientConfigError(_unreadable("ssl.ca.location", self.ca_file, err) +
                                    ": give the PEM file of the CA that signed the broker's "
                                    "certificate (a Java truststore: export it to PEM)") from None
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file, self.key_password)
            except OSError as err:
                raise ClientConfigError(
                    _unreadable("ssl.certificate.location", self.cert_file, err) + " with ssl.key.location="
                    f"{self.key_file}: give PEM files of the client certificate and its key (an "
                    "encrypted key: its password in $DPSTREAM_KAFKA_SSL_KEY_PASSWORD)") from None
        context.check_hostname = self.check_hostname
        return context

    def check_files(self) -> None:
        """ClientConfigError, before any connection, when the TLS files cannot be loaded (a
        missing CA file, a certificate or key that is not PEM) or may be changed by another
        user (``trust_problem``): one line naming the setting, instead of a connection
        failure that blames the broker."""
        if self.tls:
            self.ssl_context()

    def client_args(self) -> dict:
        """Keyword arguments every aiokafka client takes."""
        args = {"bootstrap_servers": self.bootstrap, "security_protocol": self.security_protocol}
        if self.tls:
            args["ssl_context"] = self.ssl_context()
        if self.sasl:
            args.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.username,
                        sasl_plain_password=self.password)
        return args

    def explain(self, err: BaseException, doing: str, logged: tuple[str, ...] = ()) -> str:
        """One line for a failed call to the broker, saying what to fix: an unreachable
        broker, a refused login or certificate, or the missing right (principal,
        operation, resource) when an ACL is missing. ``doing``: what was tried, as
        "<Operation> <resource>" (e.g. "Write topic examples"; "Read topic {}" takes the
        resource from the error). ``logged``: what aiokafka logged meanwhile (a failed
        bootstrap hides its cause there: ``client_errors``). Never a password or a payload."""
        import asyncio
        import socket
        import ssl

        from aiokafka import errors as E
        name = type(err).__name__
        causes = (err, err.__cause__, err.__context__)
        said = " ".join(logged)
        if isinstance(err, (E.TopicAuthorizationFailedError, E.GroupAuthorizationFailedError,
                            E.ClusterAuthorizationFailedError, E.TransactionalIdAuthorizationFailed)):
            names = err.args[0] if err.args and isinstance(err.args[0], (set, list, tuple)) else err.args
            which = ", ".join(sorted(map(str, names)))
            if "{}" in doing:
                doing = doing.format(which or "?")
            elif which and which not in doing:
                doing = f"{doing} ({which})"
            return (f"not authorized: principal {self.principal} may not {doing} ({name}); an "
                    "admin grants it with `dpstream acls --apply` (docs/deployment.md), unless an "
                    "ACL denies it on purpose (a DENY outweighs any grant: `kafka-acls.sh --list`)")
        refused = tls_refusal(self, causes, said)
        if refused:
            return f"{refused} ({name})"
        if any(isinstance(c, ssl.SSLError) for c in causes) or "[SSL" in said:
            return f"TLS with the broker at {self.bootstrap} failed ({name}: {str(err)[:120]})"
        offered = _mechanisms_offered(f"{said} {err}")
        if offered is not None or isinstance(err, E.UnsupportedSaslMechanismError) or \
                "UnsupportedSaslMechanism" in said:
            others = ", ".join(m for m in MECHANISMS[::-1] if m != self.sasl_mechanism)
            return (f"the broker at {self.bootstrap} does not offer SASL mechanism {self.sasl_mechanism}"
                    + (f"; it offers {offered}" if offered else "") + f" ({name}): set sasl.mechanism to "
                    + ("one it offers" if offered else f"one it offers ({others}? its administrator knows)"))
        if "Authentication" in name or "Sasl" in name or "SaslAuthenticationFailed" in said:
            return (f"the broker at {self.bootstrap} refused the login of {self.principal} ({name}): "
                    "check sasl.username, the password and sasl.mechanism")
        if isinstance(err, ClientConfigError):
            return str(err)
        if isinstance(err, (E.KafkaConnectionError, ConnectionError, OSError, asyncio.TimeoutError,
                            E.KafkaTimeoutError)) and _listener_mismatch(self.security_protocol, said):
            return (f"the broker at {self.bootstrap} answered but dropped the connection ({name}): "
                    f"{_listener_mismatch(self.security_protocol, said)}")
        if any(isinstance(c, socket.gaierror) for c in causes) or UNRESOLVED.search(said):
            return (f"cannot resolve a host name in {self.bootstrap} ({name}): check the host in "
                    "bootstrap.servers, --bootstrap-server or DPSTREAM_KAFKA_BOOTSTRAP")
        if isinstance(err, (E.KafkaConnectionError, ConnectionError, OSError, asyncio.TimeoutError,
                            E.KafkaTimeoutError)):
            hint = (" (a plaintext client on a TLS listener? check security.protocol)"
                    if self.security_protocol == "PLAINTEXT" and "Errno 111" not in said else "")
            return (f"cannot reach the Kafka broker at {self.bootstrap} ({name}); is it running? "
                    f"(scripts/kafka.sh start, or set --bootstrap-server / DPSTREAM_KAFKA_BOOTSTRAP){hint}")
        if isinstance(err, E.UnknownTopicOrPartitionError) and " topic " in doing:
            topic = doing.split(" topic ", 1)[1]
            return (f"the topic {topic} does not exist on {self.bootstrap} yet: the worker creates "
                    "its topics when it starts (dpstream worker, with the same --prefix)")
        if isinstance(err, E.KafkaError):
            return f"the broker at {self.bootstrap} refused to {doing} ({name}: {str(err)[:200]})"
        return f"failed to {doing} at {self.bootstrap} ({name})"

    def producer(self, **kwargs):
        from aiokafka import AIOKafkaProducer
        return AIOKafkaProducer(**self.client_args(), **kwargs)

    def consumer(self, *topics: str, **kwargs):
        from aiokafka import AIOKafkaConsumer
        return AIOKafkaConsumer(*topics, **self.client_args(), **kwargs)

    def admin(self, **kwargs):
        from aiokafka.admin import AIOKafkaAdminClient
        return AIOKafkaAdminClient(**self.client_args(), **kwargs)

    def faust_broker(self) -> str:
        """The broker URL faust takes (``kafka://host:port;host:port``)."""
        return "kafka://" + ";".join(self.bootstrap.split(","))

    def faust_credentials(self):
        """faust's credential object for these settings (None for PLAINTEXT)."""
        import faust
        if self.sasl:
            return faust.SASLCredentials(username=self.username, password=self.password,
                                         mechanism=self.sasl_mechanism,
                                         ssl_context=self.ssl_context() if self.tls else None)
        if self.tls:
            return faust.SSLCredentials(self.ssl_context())
        return None


def _protocol(props: dict[str, str], where: str) -> str:
    """``security.protocol``, never guessed (module docstring): a ``sasl.*`` or ``ssl.*``
    setting without it, or under a protocol that would ignore it, is refused."""
    protocol = props.get("security.protocol")
    sasl = sorted(k for k in props if k.startswith("sasl."))
    tls = sorted(k for k in props if k.startswith("ssl."))
    if protocol is None:
        if sasl or tls:
            raise ClientConfigError(
                f"{where}: {(sasl or tls)[0]} is set but security.protocol is not, and Kafka clients "
                "then connect PLAINTEXT (no TLS, no login): set security.protocol=SASL_SSL "
                "(or SSL, or SASL_PLAINTEXT)")
        return "PLAINTEXT"
    protocol = protocol.strip().upper()
    if protocol not in PROTOCOLS:                 # the value is not shown: a password pasted on
        raise ClientConfigError(f"{where}: security.protocol is none of {', '.join(PROTOCOLS)} "
                                "(its value is not shown: it could be a misplaced secret)")
    if sasl and not protocol.startswith("SASL"):
        raise ClientConfigError(f"{where}: {sasl[0]} is set but security.protocol={protocol} makes no "
                                "SASL login (the credentials would be ignored): use SASL_SSL")
    if tls and not protocol.endswith("SSL"):
        raise ClientConfigError(f"{where}: {tls[0]} is set but security.protocol={protocol} does not "
                                "use TLS (the connection would be unencrypted): use SASL_SSL or SSL")
    return protocol


def _mechanism(props: dict[str, str], protocol: str, where: str) -> str | None:
    """``sasl.mechanism`` (or librdkafka's ``sasl.mechanisms``); no default (module docstring)."""
    mechanism = props.get("sasl.mechanism") or props.get("sasl.mechanisms")
    if protocol.startswith("SASL") and not mechanism:
        raise ClientConfigError(
            f"{where}: security.protocol={protocol} but no sasl.mechanism, and Kafka clients then "
            f"use GSSAPI (Kerberos), which dpstream does not speak: set sasl.mechanism to one of "
            f"{', '.join(MECHANISMS)} (SCRAM never sends the password itself)")
    mechanism = mechanism.strip().upper() if mechanism else None
    if mechanism is not None and mechanism not in MECHANISMS:
        raise ClientConfigError(f"{where}: sasl.mechanism is none of {', '.join(MECHANISMS)} (its value "
                                "is not shown: it could be a misplaced secret)")
    return mechanism


def _hostname_check(props: dict[str, str], where: str) -> bool:
    """Whether to check the broker's name: ``https`` (default) yes, the empty value no
    (``from_settings`` warns), anything else refused (module docstring)."""
    value = props.get("ssl.endpoint.identification.algorithm", "https").strip()
    if value.lower() == "https":
        return True
    if value == "":
        return False
    shown = re.sub(r"[^\x21-\x7e]", "?", value)[:40]
    raise ClientConfigError(
        f"{where}: ssl.endpoint.identification.algorithm={shown!r} is neither https (verify the "
        "broker's name, the default) nor empty (Kafka's way to turn the check off); "
        "librdkafka's 'none' is not taken, so a typo can never turn it off")


def _jaas_options(jaas: str, where: str) -> dict[str, str]:
    """``username`` and ``password`` of a Java client's ``sasl.jaas.config`` line
    (``<LoginModule> required username="u" password="p";``). Refused, without showing the
    line (it holds the password): a quote that is not closed, or no ``;`` at the end (Kafka's
    JaasConfig parser refuses both: "Expected ';'"); before, an unclosed quote made the
    password silently missing and the error blamed a missing sasl.username/password."""
    if jaas.count('"') % 2:
        raise ClientConfigError(f"{where}: sasl.jaas.config has a quote that is not closed (the line is "
                                'not shown: it holds the password): username="..." password="...";')
    if not jaas.rstrip().endswith(";"):
        raise ClientConfigError(f"{where}: sasl.jaas.config does not end with ';' (Kafka's clients "
                                'refuse it too): ... required username="..." password="...";')
    return dict(re.findall(r'(username|password)\s*=\s*"([^"]*)"', jaas))


def _unreadable(setting: str, path: str | None, err: OSError) -> str:
    """'<setting>=<path>: <why>' for a TLS file OpenSSL could not load (never its content)."""
    import ssl
    if isinstance(err, ssl.SSLError):
        why = f"not PEM that OpenSSL reads ({err.reason or err.strerror or 'unreadable'})"
    else:
        why = err.strerror or type(err).__name__
    return f"{setting}={path}: {why}"


def _mechanisms_offered(said: str) -> str | None:
    """The SASL mechanisms a broker offers, when aiokafka's error says so
    (``AIOKafkaConnection._do_sasl_handshake``: "Kafka broker does not support X sasl
    mechanism. Enabled mechanisms are: [...]", for a handshake answered without an error
    code); None otherwise. Kafka's own brokers answer an unknown mechanism with error 33,
    which aiokafka raises as a bare UnsupportedSaslMechanismError without the list, and a
    failed bootstrap hides either behind a KafkaConnectionError (the error is in what
    aiokafka logged). The names come from whoever answered: only mechanism-like names
    are shown, a few at most."""
    found = re.search(r"does not support \S+ sasl mechanism\. Enabled mechanisms are: \[([^\]]*)\]", said)
    if found is None:
        return None
    names = [n for n in re.findall(r"'([^']*)'", found.group(1)) if re.fullmatch(r"[A-Z0-9_-]{1,40}", n)]
    return ", ".join(names[:8]) or "none"


def _listener_mismatch(protocol: str, said: str) -> str | None:
    """What to check when the broker took the TCP connection and dropped it at once (aiokafka
    logs "Unable connect" with no OS error): a client whose ``security.protocol`` is not
    the listener's. Kafka answers a TLS handshake on a plaintext listener, or a SASL
    handshake on a listener without SASL, by closing the connection."""
    if "Unable connect" not in said or "Errno" in said or "imeout" in said or protocol == "PLAINTEXT":
        return None
    if "IllegalSaslState" in said:
        return (f"security.protocol={protocol} logs in with SASL, and this listener takes no SASL "
                f"login: set security.protocol to the listener's ({'SSL' if protocol == 'SASL_SSL' else 'PLAINTEXT'}?)")
    return (f"security.protocol={protocol} starts TLS; is this listener plaintext? set security.protocol "
            "to the listener's (PLAINTEXT or SASL_PLAINTEXT?)")


def trust_problem(path: str, *, secret: bool = False) -> str | None:
    """Why the file at ``path`` (a client config, a TLS file it names, a token file) may not
    be trusted, as "<path>...: <fix>", or None when it may (module docstring): another
    user's file, one others may write, one reached through a directory or a symbolic link
    that another user may change; with ``secret``, also one that others may read. A
    missing or unreadable file is left to its reader, which says so."""
    try:
        resolved = _resolved(path)
        st = os.stat(resolved)
    except _Untrusted as err:
        return str(err)
    except OSError:
        return None
    return _judged(path, st, resolved, secret)


def read_trusted(path: str, *, secret: bool = False) -> tuple[bytes | None, str | None]:
    """(the bytes of the file at ``path``, None), judged (``trust_problem``) on the very
    file read: opened without following a link at its last name, its owner and mode
    taken from the open descriptor, so a name swapped between a check and a read cannot
    pass another file off; or (None, why it may not be trusted). OSError when it cannot
    be read."""
    try:
        resolved = _resolved(path)
    except _Untrusted as err:
        return None, str(err)
    fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        problem = _judged(path, os.fstat(fd), resolved, secret)
        if problem:
            return None, problem
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(), None
    finally:
        os.close(fd)


class _Untrusted(Exception):
    pass


def _resolved(path: str) -> Path:
    """``path`` with its links resolved by ``paths._walk`` (every directory and link on the
    way judged), as its reader opens it: relative to the current directory, ``~`` not
    expanded (a shell leaves --client-config=~/x as it is, and so does open()). OSError
    when it does not exist; _Untrusted (the line) when the way to it is not safe."""
    from .paths import UnsafeOut, _walk
    os.stat(path)
    literal = Path(path) if os.path.isabs(path) else Path(os.getcwd()) / path
    try:
        return _walk(literal, existing=True)
    except UnsafeOut as err:
        raise _Untrusted(f"{err.problem}: another user could put their own file in its place; keep "
                         "it in a directory only you (or root) may change") from None


def _judged(path: str, st: os.stat_result, resolved: Path, secret: bool) -> str | None:
    from .paths import OTHERS_WRITE, _private_group
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in (0, os.geteuid()):
        return (f"{path} belongs to uid {st.st_uid}, not to you or root: its owner can change what it "
                "says (and read any secret in it); use a copy of your own")
    if st.st_mode & OTHERS_WRITE and not _private_group(st, resolved):
        return (f"{path} is writable by other users (mode {mode:04o}), who can change what it says: "
                f"chmod go-w {path}")
    if secret and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"{path} holds a secret and others can read it (mode {mode:04o}): chmod 600 {path}"
    return None


def read_properties(path: str, data: bytes | None = None) -> dict[str, str]:
    """A Java-style properties file (its bytes ``data`` when read already): ``key=value`` or
    ``key: value`` lines, ``#`` and ``!`` comments. ClientConfigError on an unreadable
    file or an unknown key (a typo must not silently fall back to PLAINTEXT)."""
    try:
        data = Path(path).read_bytes() if data is None else data
    except OSError as err:
        raise ClientConfigError(f"cannot read the client config {path}: {err.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:      # a key or a keystore given by mistake: never shown
        raise ClientConfigError(f"{path} is not a client properties file: byte {err.start + 1} is not "
                                "UTF-8 text (a key, a certificate or a Java keystore? those are named "
                                "inside the file: ssl.key.location=..., ssl.ca.location=...)") from None
    props = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if m is None:
            raise ClientConfigError(f"{path} line {n}: expected key=value")
        key, value = m.groups()
        if key not in KNOWN:
            raise ClientConfigError(f"{path} line {n}: unknown setting {key!r} (known: {', '.join(sorted(KNOWN))})")
        props[key] = value.strip()
    return props


def honour_cancel() -> None:
    """Raise CancelledError when this task was asked to stop and a client's close swallowed
    the request. aiokafka's close awaits a helper task it cancelled under
    ``suppress(CancelledError)`` (``AIOKafkaClient.close``, ``Fetcher.close``), and its
    producer's ``Sender.close`` awaits a sender task that returns when cancelled: a
    cancellation that comes while a client closes ends there, and only
    ``Task.cancelling()`` still counts it. asyncio.run's Ctrl-C is such a cancellation;
    without this a command went on as if none had come (``produce`` sent the whole file
    and exited 0). Call it after a client is closed (``running`` does)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


@asynccontextmanager
async def running(client):
    """An aiokafka client started, and stopped (closed, for the admin client) however the
    block ends, also when starting it failed: an unreachable broker must not leave
    "Unclosed AIOKafkaConsumer" warnings behind. A stop asked for while it closed is
    not lost (``honour_cancel``)."""
    stop = getattr(client, "stop", None) or client.close
    try:
        await client.start()
        yield client
    finally:
        try:
            await stop()
        except Exception:            # noqa: BLE001 - already broken: nothing left to close
            pass
        honour_cancel()


class TLSShutdownRace:
    """A logging filter for the ``asyncio`` logger that drops one report: "Future exception
    was never retrieved" for an ``ssl.SSLError`` APPLICATION_DATA_AFTER_CLOSE_NOTIFY, which
    asyncio's SSL transport (sslproto ``_do_shutdown``) leaves on a future nobody awaits
    when the broker still sends data while the client closes a TLS connection, e.g. right
    after it refused a request. The command has already said what happened in one line;
    nothing is lost, and the report was a traceback after it (a CI run, 2026-12-03). Any
    other asyncio error is kept."""

    def filter(self, record) -> bool:
        import ssl
        err = record.exc_info[1] if record.exc_info else None
        return not (isinstance(err, ssl.SSLError)
                    and getattr(err, "reason", None) == "APPLICATION_DATA_AFTER_CLOSE_NOTIFY"
                    and record.getMessage().startswith("Future exception was never retrieved"))


def quiet_tls_shutdown() -> None:
    """Install ``TLSShutdownRace`` on the ``asyncio`` logger, once."""
    import logging
    log = logging.getLogger("asyncio")
    if not any(isinstance(f, TLSShutdownRace) for f in log.filters):
        log.addFilter(TLSShutdownRace())


class client_errors:
    """Collects what aiokafka logs at ERROR while a block runs, without printing it: a
    failed bootstrap raises a bare KafkaConnectionError and logs the reason (a refused
    login, an untrusted certificate), which ``Kafka.explain`` reads from ``messages``."""

    def __init__(self):
        import logging

        class _Keep(logging.Handler):
            def __init__(self, sink):
                super().__init__(logging.ERROR)
                self.sink = sink

            def emit(self, record):
                self.sink.append(record.getMessage()[:300])

        self.messages: list[str] = []
        self._handler = _Keep(self.messages)
        self._logger = logging.getLogger("aiokafka")

    def __enter__(self):
        self._saved = (self._logger.level, self._logger.propagate)
        self._logger.setLevel(self._handler.level)
        self._logger.propagate = False
        self._logger.addHandler(self._handler)
        return self

    def __exit__(self, *exc):
        self._logger.removeHandler(self._handler)
        self._logger.setLevel(self._saved[0])
        self._logger.propagate = self._saved[1]
        return False
