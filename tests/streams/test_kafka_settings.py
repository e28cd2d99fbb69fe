"""Client settings (streams/worker/kafka.py): Kafka's standard property names, secrets only from
0600 files or the environment, never in a repr or a message; the one-line explanations."""
import ssl

import pytest
from aiokafka import errors as E

from dpstream.streams.worker.kafka import ClientConfigError, Kafka, read_properties


def props(tmp_path, text: str, mode: int = 0o600) -> str:
    path = tmp_path / "client.properties"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def test_a_sasl_ssl_config_reads_like_a_kafka_client_config(tmp_path):
    path = props(tmp_path, "# team config\nbootstrap.servers=b1:9093,b2:9093\nsecurity.protocol=sasl_ssl\n"
                 "sasl.mechanism=SCRAM-SHA-512\nsasl.username = worker\nsasl.password=s3cret-pw\n"
                 f"ssl.ca.location: {tmp_path}/ca.pem\n")
    k = Kafka.from_settings(None, path, environ={})
    assert (k.bootstrap, k.security_protocol, k.sasl_mechanism, k.username, k.password) == \
        ("b1:9093,b2:9093", "SASL_SSL", "SCRAM-SHA-512", "worker", "s3cret-pw")
    assert k.ca_file == f"{tmp_path}/ca.pem" and k.check_hostname and k.principal == "User:worker"
    assert "s3cret-pw" not in repr(k)
    args = Kafka("h:1", "SASL_PLAINTEXT", "PLAIN", "worker", "pw").client_args()
    assert (args["sasl_plain_username"], args["sasl_mechanism"], args["security_protocol"]) == \
        ("worker", "PLAIN", "SASL_PLAINTEXT") and "ssl_context" not in args
    assert k.faust_broker() == "kafka://b1:9093;b2:9093"


def test_a_java_jaas_line_gives_user_and_password(tmp_path):
    path = props(tmp_path, "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                 'org.apache.kafka.common.security.plain.PlainLoginModule required username="ana" password="pw1";\n')
    k = Kafka.from_settings("h:1", path, environ={})
    assert (k.bootstrap, k.username, k.password, k.tls) == ("h:1", "ana", "pw1", False)


def test_the_brokers_come_from_the_flag_then_the_file_then_the_environment(tmp_path):
    path = props(tmp_path, "bootstrap.servers=file:9093\n", 0o644)
    env = {"DPSTREAM_KAFKA_BOOTSTRAP": "env:9092"}
    assert Kafka.from_settings("flag:1", path, environ=env).bootstrap == "flag:1"
    assert Kafka.from_settings(None, path, environ=env).bootstrap == "file:9093"
    assert Kafka.from_settings(None, None, environ=env).bootstrap == "env:9092"
    assert Kafka.from_settings(None, None, environ={}).bootstrap == "127.0.0.1:9092"
    assert Kafka.from_settings(None, None, environ={"DPSTREAM_KAFKA_CONFIG": path}).bootstrap == "file:9093"


def test_secrets_come_from_the_environment_and_a_readable_password_file_is_refused(tmp_path):
    path = props(tmp_path, "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=u\n", 0o644)
    k = Kafka.from_settings(None, path, environ={"DPSTREAM_KAFKA_SASL_PASSWORD": "from-env"})
    assert k.password == "from-env"                 # no password in the file: its mode is free
    with pytest.raises(ClientConfigError, match="SASL needs sasl.username and a password"):
        Kafka.from_settings(None, path, environ={})
    shared = props(tmp_path, "security.protocol=SASL_SSL\nsasl.username=u\nsasl.password=leaky\n", 0o640)
    with pytest.raises(ClientConfigError, match="chmod 600") as err:
        Kafka.from_settings(None, shared, environ={})
    assert "leaky" not in str(err.value)


@pytest.mark.parametrize("text,says", [
    ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.username=u\nsasl.password=p\n", "sasl.mechanism"),
    ("security.protocol=TLS\n", "security.protocol"),
    ("bootstrap.server=typo:1\n", "unknown setting 'bootstrap.server'"),
    ("just words\n", "line 1: expected key=value"),
    ("security.protocol=SSL\nssl.certificate.location=c.pem\n", "needs both"),
    ("ssl.truststore.location=t.jks\n", "only a PEM truststore"),
])
def test_a_config_that_cannot_work_is_refused_naming_the_setting(tmp_path, text, says):
    with pytest.raises(ClientConfigError, match=says) as err:
        Kafka.from_settings(None, props(tmp_path, text), environ={})
    assert "sasl.password=p" not in str(err.value)


def test_an_unreadable_config_file_is_one_clear_error(tmp_path):
    with pytest.raises(ClientConfigError, match="cannot read the client config"):
        read_properties(str(tmp_path / "missing.properties"))


def test_hostname_checking_is_on_unless_turned_off_explicitly(tmp_path):
    on = Kafka(security_protocol="SSL").ssl_context()
    off = Kafka.from_settings(None, props(tmp_path, "security.protocol=SSL\n"
                                          "ssl.endpoint.identification.algorithm=\n"), environ={})
    assert on.check_hostname and on.verify_mode == ssl.CERT_REQUIRED
    assert not off.ssl_context().check_hostname


def test_each_failure_is_explained_in_one_line_without_secrets():
    k = Kafka("b:9094", "SASL_SSL", "SCRAM-SHA-512", "producer", "pw-never-shown")
    cases = [
        (E.TopicAuthorizationFailedError({"p-examples"}), "Read topic {}",
         "principal User:producer may not Read topic p-examples"),
        (E.GroupAuthorizationFailedError(), "Read group g", "may not Read group g"),
        (E.KafkaConnectionError("x"), "talk to", "cannot reach the Kafka broker at b:9094"),
        (E.UnknownTopicOrPartitionError(), "Read topic p-models", "the topic p-models does not exist"),
        (E.SaslAuthenticationFailed("bad credentials"), "talk to", "refused the login of User:producer"),
        (E.AuthenticationFailedError(), "talk to", "refused the login of User:producer"),
    ]
    for err, doing, says in cases:
        line = k.explain(err, doing)
        assert says in line and "\n" not in line and "pw-never-shown" not in line, line
    verify = E.KafkaConnectionError("connect")
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    cause.verify_code, cause.verify_message = 20, "unable to get local issuer certificate"
    verify.__cause__ = cause
    nobody_there = Kafka("127.0.0.1:1", "SSL", ca_file="/etc/ca.pem")    # nothing to read the certificate from
    assert "comes from a CA which ssl.ca.location (/etc/ca.pem) does not hold: set ssl.ca.location" in \
        nobody_there.explain(verify, "talk to")
    plain = Kafka("b:9094")
    assert "plaintext client on a TLS listener?" in plain.explain(E.KafkaConnectionError("x"), "talk to")
    refused = ('Unable connect to "b:9094": [Errno 111] Connect call failed',)   # nothing listens
    assert "TLS listener" not in plain.explain(E.KafkaConnectionError("x"), "talk to", refused)


def test_a_host_name_that_does_not_resolve_is_named_as_such_not_as_a_broker_down():
    """Before: "is it running? ... (a plaintext client on a TLS listener?)" for a typo in
    the host name."""
    import socket
    k = Kafka("kafak.internal:9092")
    said = ('Unable connect to "kafak.internal:9092": [Errno -2] Name or service not known',)
    for line in (k.explain(E.KafkaConnectionError("x"), "talk to", said),
                 k.explain(E.KafkaConnectionError("x"), "talk to",
                           ('Unable connect to "kafak.internal:9092": [Errno -3] Temporary failure in name resolution',))):
        assert line.startswith("cannot resolve a host name in kafak.internal:9092") and "running" not in line, line
    err = E.KafkaConnectionError("x")
    err.__cause__ = socket.gaierror(-2, "Name or service not known")
    assert "cannot resolve" in k.explain(err, "talk to")
    refused = ('Unable connect to "b:9094": [Errno 111] Connect call failed',)
    assert "is it running?" in Kafka("b:9094").explain(E.KafkaConnectionError("x"), "talk to", refused)


def test_a_refused_right_names_the_grant_and_that_a_deny_outweighs_it():
    line = Kafka("b:9094", "SASL_SSL", "SCRAM-SHA-512", "querier", "pw").explain(
        E.TopicAuthorizationFailedError({"p-examples"}), "Write topic {}")
    assert "may not Write topic p-examples" in line and "dpstream acls --apply" in line
    assert "a DENY outweighs any grant" in line
