"""Edges of the CLI a user meets by mistake: each answered by one line (exit 2 for a usage
error), never a traceback or a silent wrong result. No broker unless a test names
``kafka_bootstrap``: the others point at 127.0.0.1:1, where nothing listens, and are
refused before any connection."""
import json
import os
import socket
import stat
from pathlib import Path

import pytest

from dpstream.streams.cli.commands import NothingToAudit, main, read_export, write_export

from .kafka_helpers import KEY_HEX

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = ["--bootstrap-server", "127.0.0.1:1"]


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)
    monkeypatch.delenv("DPSTREAM_KAFKA_CONFIG", raising=False)


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def props(tmp_path, text: str) -> str:
    path = tmp_path / "client.properties"
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


# ------------------------------------------------------------------ item 10: argparse, worker start
@pytest.mark.parametrize("argv, unknown", [(["consume", "--topic", "answers", "--bogus"], "--bogus"),
                                          (["models", "list", "--frob", "1"], "--frob 1")])
def test_an_unknown_flag_is_refused_with_the_commands_usage(capsys, argv, unknown):
    """Before: argparse handed the unknown flag back to the top-level parser, whose usage
    (`dpstream [-h] [--version] COMMAND ...`) says nothing of the command's flags."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err.splitlines()
    assert exit.value.code == 2
    assert err[0].startswith(f"usage: dpstream {argv[0]} [-h]")
    assert err[-1] == f"dpstream {argv[0]}: error: unrecognized arguments: {unknown}"


def test_a_worker_app_id_outside_its_prefix_is_refused_before_connecting(capsys, tmp_path):
    """Before: the worker took any app id and went on to connect (its group and changelogs
    then sat outside its tenant's prefix); `dpstream acls` refused the same names."""
    argv = ["worker", *NOWHERE, "--prefix", "a-", "--app-id", "b-x", "--data-dir", str(tmp_path / "w")]
    assert main(argv) == 2
    assert one_line(capsys) == (
        "dpstream worker: --app-id 'b-x': the worker's app id must start with the topic prefix 'a-' and "
        "go on with a name (default 'a-dpstream'), so that its group and internal topics stay in its tenant")
    assert not (tmp_path / "w").exists()


def test_a_web_port_in_use_or_an_address_not_of_this_machine_is_one_line(capsys, tmp_path):
    """Before: the worker connected, created its topics, started, and then faust's web
    server ended it with an OSError traceback (errno 98, or 99 for --web-bind 192.0.2.1)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["worker", *NOWHERE, "--web-port", str(port), "--data-dir", str(tmp_path / "w")]) == 2
        assert one_line(capsys) == (f"dpstream worker: --web-port {port}: 127.0.0.1:{port} is in use "
                                    "(another worker's pages?): give another --web-port, or stop what "
                                    "listens there")
    assert main(["worker", *NOWHERE, "--web-port", str(port), "--web-bind", "192.0.2.1",
                 "--data-dir", str(tmp_path / "w")]) == 2       # TEST-NET-1: no machine's address
    line = one_line(capsys)
    assert line.startswith(f"dpstream worker: --web-bind '192.0.2.1': cannot listen on 192.0.2.1:{port} (")
    assert line.endswith("): give an address of this machine, or 127.0.0.1")


# ------------------------------------------------------------------ item 12: client configs
def test_a_missing_or_unreadable_ca_file_is_named_before_connecting(capsys, tmp_path):
    """Before: "cannot reach the Kafka broker at ... (FileNotFoundError); is it running?"
    for a CA file that does not exist, and "TLS with the broker ... failed (SSLError: [SSL]
    PEM lib ...)" for a client key that is not PEM: both blamed the broker."""
    path = props(tmp_path, f"security.protocol=SSL\nssl.ca.location={tmp_path}/nope.pem\n")
    assert main(["consume", *NOWHERE, "--command-config", path, "--topic", "answers"]) == 2
    assert one_line(capsys) == (f"dpstream consume: ssl.ca.location={tmp_path}/nope.pem: No such file or "
                                "directory: give the PEM file of the CA that signed the broker's "
                                "certificate (a Java truststore: export it to PEM)")
    (tmp_path / "client.key").write_bytes(bytes(range(256)))
    (tmp_path / "client.key").chmod(0o600)      # a key others can read is refused first
    path = props(tmp_path, f"security.protocol=SSL\nssl.certificate.location={tmp_path}/client.key\n"
                 f"ssl.key.location={tmp_path}/client.key\n")
    assert main(["consume", *NOWHERE, "--command-config", path, "--topic", "answers"]) == 2
    line = one_line(capsys)
    assert line.startswith(f"dpstream consume: ssl.certificate.location={tmp_path}/client.key: not PEM "
                           "that OpenSSL reads (")
    assert line.endswith(f") with ssl.key.location={tmp_path}/client.key: give PEM files of the client "
                         "certificate and its key (an encrypted key: its password in "
                         "$DPSTREAM_KAFKA_SSL_KEY_PASSWORD)")


@pytest.mark.parametrize("jaas, says", [
    ('required username="u" password="pw-9;', "has a quote that is not closed (the line is not shown: "
                                              'it holds the password): username="..." password="...";'),
    ('required username="u" password="pw-9"', "does not end with ';' (Kafka's clients refuse it too): ... "
                                              'required username="..." password="...";'),
])
def test_a_jaas_line_kafka_would_refuse_is_refused_without_showing_it(capsys, tmp_path, jaas, says):
    """Before: an unclosed quote left the password unread, and the error said "SASL needs
    sasl.username and a password", which the line held."""
    path = props(tmp_path, "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                 f"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule {jaas}\n")
    assert main(["consume", *NOWHERE, "--command-config", path, "--topic", "answers"]) == 2
    assert one_line(capsys) == f"dpstream consume: {path}: sasl.jaas.config {says}"


@pytest.mark.parametrize("setting", ["security.protocol", "sasl.mechanism"])
def test_an_unknown_protocol_or_mechanism_is_refused_without_echoing_its_value(capsys, tmp_path, setting):
    """Before: the error quoted the value, so a password pasted on the wrong line (as one
    attacker-run config had) was printed to the terminal and its scrollback."""
    values = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", setting: "Sup3rSecretPW"}
    path = props(tmp_path, "".join(f"{k}={v}\n" for k, v in values.items()) +
                 "sasl.username=u\nsasl.password=p\n")
    assert main(["consume", *NOWHERE, "--command-config", path, "--topic", "answers"]) == 2
    line = one_line(capsys)
    assert f"{setting} is none of" in line and "sup3rsecretpw" not in line.lower(), line


def test_binary_files_given_as_a_config_or_a_key_are_one_line(capsys, tmp_path, monkeypatch):
    """Before: a UnicodeDecodeError traceback, for a binary file given as --command-config
    and for one named by $DPSTREAM_SECRET_KEY_FILE (a raw 32-byte key)."""
    binary = tmp_path / "raw.key"
    binary.write_bytes(b"\x00\xfe" + os.urandom(30))
    binary.chmod(0o600)
    assert main(["consume", *NOWHERE, "--command-config", str(binary), "--topic", "answers"]) == 2
    assert one_line(capsys) == (f"dpstream consume: {binary} is not a client properties file: byte 2 is "
                                "not UTF-8 text (a key, a certificate or a Java keystore? those are named "
                                "inside the file: ssl.key.location=..., ssl.ca.location=...)")
    monkeypatch.delenv("DPSTREAM_SECRET_KEY")
    monkeypatch.setenv("DPSTREAM_SECRET_KEY_FILE", str(binary))
    assert main(["worker", *NOWHERE, "--data-dir", str(tmp_path / "w")]) == 2
    assert one_line(capsys) == (f"dpstream worker: secret key file '{binary}' is not text (byte 2 is not "
                                "ASCII): it holds the key as 64+ hex digits, e.g. python3 -c 'import "
                                "secrets; print(secrets.token_hex(32))'")


def test_a_key_file_that_is_a_directory_is_said_to_be_one(capsys, tmp_path, monkeypatch):
    """Before: ``DPSTREAM_SECRET_KEY_FILE=<a directory>`` was said not to exist."""
    monkeypatch.delenv("DPSTREAM_SECRET_KEY")
    monkeypatch.setenv("DPSTREAM_SECRET_KEY_FILE", str(tmp_path))
    assert main(["worker", *NOWHERE, "--data-dir", str(tmp_path / "w")]) == 2
    assert one_line(capsys) == (f"dpstream worker: secret key file '{tmp_path}' is a directory: name "
                                "the file in it that holds the key")


@pytest.mark.parametrize("config, says", [
    ("security.protocol=SSL\n", "security.protocol=SSL starts TLS; is this listener plaintext? set "
                                "security.protocol to the listener's (PLAINTEXT or SASL_PLAINTEXT?)"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=u\nsasl.password=p\n",
     "security.protocol=SASL_PLAINTEXT logs in with SASL, and this listener takes no SASL login: set "
     "security.protocol to the listener's (PLAINTEXT?)"),
])
def test_a_protocol_the_listener_does_not_speak_gets_a_hint(capsys, tmp_path, kafka_bootstrap, config, says):
    """Before: "cannot reach the Kafka broker at ...; is it running?", of a broker that was
    running and had answered (on its plaintext listener, which closed the connection)."""
    path = props(tmp_path, config)
    assert main(["consume", "--bootstrap-server", kafka_bootstrap, "--command-config", path,
                 "--topic", "answers", "--timeout", "1"]) == 1
    assert one_line(capsys) == (f"dpstream consume: the broker at {kafka_bootstrap} answered but dropped "
                                f"the connection (KafkaConnectionError): {says}")


# ------------------------------------------------------------------ item 13: consume's bounds
@pytest.mark.parametrize("flags, says", [
    (["--max-messages", "-1"], "--max-messages -1: a number of records, 0 or more"),
    (["--timeout", "-5"], "--timeout -5: seconds, a finite number 0 to 31,536,000 (a year; leave it out to follow until interrupted)"),
    (["--timeout", "nan"], "--timeout nan: seconds, a finite number 0 to 31,536,000 (a year; leave it out to follow until interrupted)"),
    (["--timeout", "1e308"], "--timeout 1e+308: seconds, a finite number 0 to 31,536,000 (a year; leave it out to follow until interrupted)"),
    (["--timeout-ms", "-1"], "--timeout-ms -1: milliseconds, 0 to 31,536,000,000 (a year; leave it out to follow until interrupted)"),
    (["--timeout-ms", "1" + "0" * 30], f"--timeout-ms 1{'0' * 30}: milliseconds, 0 to 31,536,000,000 (a year; leave it out to follow until interrupted)"),
    (["--timeout-ms", "500", "--timeout", "1"], "--timeout and --timeout-ms: give one of them"),
])
def test_consume_refuses_negative_bounds_before_connecting(capsys, flags, says):
    """Before: --max-messages -1 read nothing and exited 0; --timeout -5 went to aiokafka as
    a negative wait; --timeout-ms (Kafka's console consumer's flag) was an unknown flag;
    --timeout 1e308 became infinite milliseconds: "failed to Read topic answers ...
    (OverflowError)" after connecting."""
    assert main(["consume", *NOWHERE, "--topic", "answers", *flags]) == 2
    assert one_line(capsys) == f"dpstream consume: {says}"


# ------------------------------------------------------------------ item 15: --out and --data-dir
def test_an_export_that_cannot_read_its_topics_leaves_no_directory_behind(capsys, tmp_path):
    """Before: --out was created (0700, empty) before the topics were read, and stayed
    there when the read failed or was interrupted: an empty export directory."""
    out = tmp_path / "new" / "audit"
    assert main(["export", *NOWHERE, "--out", str(out)]) == 1
    assert "cannot reach the Kafka broker at 127.0.0.1:1" in one_line(capsys)
    assert not out.exists()


class Interrupted:
    """Records that end in a Ctrl-C after ``n`` of them."""

    def __init__(self, n: int):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield {"seq": i}
        raise KeyboardInterrupt


def test_an_interrupted_export_keeps_the_previous_one_or_leaves_none(tmp_path):
    """Before: every file was truncated first and written one after another, so a Ctrl-C
    mid-write left model-events.jsonl whole beside an empty or cut ledger.jsonl: an
    export that `replay --dir` took as complete."""
    log = [{"partition": 0, "offset": i, "value": {"seq": i}} for i in range(3)]
    out = tmp_path / "audit"
    write_export(str(out), log, {"ledger": [{"seq": 0}], "predictions": [{"seq": 0}]})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(KeyboardInterrupt):
        write_export(str(out), log + log, {"predictions": [{"seq": 1}], "ledger": Interrupted(5)})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before      # no .partial file left
    new = tmp_path / "new"
    with pytest.raises(KeyboardInterrupt):
        write_export(str(new), log, {"ledger": Interrupted(5)})
    assert not new.exists()


def test_an_export_of_the_public_topics_is_staged_with_predictions_as_its_marker(tmp_path):
    """``export --public`` writes no model-events.jsonl, so predictions.jsonl is the file put
    in place last; `replay --no-key --dir` refuses a directory without it (a public export
    cut between its renames), as it refuses a full export without model-events.jsonl."""
    out = tmp_path / "public"
    outputs = {"predictions": [{"seq": 0}], "ledger": [{"seq": 0}]}
    write_export(str(out), [], outputs, public=True, written=("ledger", "predictions"))
    assert sorted(p.name for p in out.iterdir()) == ["ledger.jsonl", "predictions.jsonl"]
    assert read_export(out, public=True)[1]["predictions"] == [{"seq": 0}]
    (out / "predictions.jsonl").unlink()
    with pytest.raises(NothingToAudit, match="no predictions.jsonl"):
        read_export(out, public=True)


def test_an_out_whose_parent_others_may_write_without_the_sticky_bit_is_refused(capsys, tmp_path):
    """Before: taken; whoever could write the parent could move the finished export away and
    put theirs in its place for `replay --dir` to read."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert main(["export", *NOWHERE, "--out", str(shared / "audit")]) == 2
    assert one_line(capsys) == (
        f"dpstream export: --out {shared}/audit's parent {shared} is writable by other users without "
        "the sticky bit (mode 0777): they could move the directory away and put theirs in its place; "
        "choose a directory under one of yours")
    shared.chmod(0o1777)                                 # as /tmp: the sticky bit is enough
    assert main(["export", *NOWHERE, "--out", str(shared / "audit")]) == 1
    assert "cannot reach the Kafka broker" in one_line(capsys)


@pytest.mark.parametrize("make, says", [
    (lambda p: p.write_text("x"), "exists and is not a directory: give --data-dir a directory of your own "
                                  "(a missing one is created 0700), or leave it out for the default under "
                                  "~/.local/state"),
    (lambda p: (p.mkdir(), p.chmod(0o777)),
     "is open to other users (mode 0777) and the worker keeps its table files there: chmod 700 {p}, or "
     "give --data-dir a directory of your own (a missing one is created 0700), or leave it out for the "
     "default under ~/.local/state"),
])
def test_a_refused_data_dir_says_what_is_wrong_and_how_to_fix_it(capsys, tmp_path, make, says):
    """Before: "--data-dir X exists and is not a directory" (no way out), and for a
    directory others may write, the --out text ("plant links or swap files ... never
    chmod-ed here") without the chmod that fixes it."""
    path = tmp_path / "w"
    make(path)
    assert main(["worker", *NOWHERE, "--data-dir", str(path)]) == 2
    assert one_line(capsys) == f"dpstream worker: --data-dir {path} " + says.format(p=path)
    if path.is_dir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o777                 # never chmod-ed


def test_an_empty_data_dir_is_refused_and_a_relative_xdg_state_home_is_ignored(capsys, tmp_path, monkeypatch):
    """``--data-dir ''`` fell back to the default without a word; a relative $XDG_STATE_HOME
    was used relative to the current directory (the XDG spec says to ignore it)."""
    from dpstream.streams.cli.commands import _default_data_dir
    assert main(["worker", *NOWHERE, "--data-dir", ""]) == 2
    assert one_line(capsys) == ("dpstream worker: --data-dir is empty: give a directory, or leave the "
                                "option out for the default under ~/.local/state")
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    assert _default_data_dir("app").is_absolute()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert _default_data_dir("app").is_relative_to(tmp_path)


# ------------------------------------------------------------------ item 9: models register
def registration_of(size: int) -> dict:
    """A registration whose compact JSON (as sent) has exactly ``size`` bytes: a vocabulary
    of 100-character values, the last one cut to fit."""
    from dpstream.schemas import ModelConfig
    base = {"model_id": "big", "budget": {"epsilon": 2.0, "delta": 1e-6},
            "params": {"kind": "continual_winnow", "horizon": 1000},
            "features": [{"type": "categorical", "name": "c", "vocabulary": []}]}

    def wire(d):
        return len(json.dumps(ModelConfig.model_validate(d).model_dump(mode="json"), separators=(",", ":")))
    vocab = base["features"][0]["vocabulary"]
    vocab.append("0" * 100)
    more, rest = divmod(size - wire(base), 103)   # each further value: ',"' + 100 characters + '"'
    vocab += [f"{i:06d}".ljust(100, "v") for i in range(1, more + 1)]
    vocab.append("z" * 50)
    while (off := size - wire(base)) != 0:      # the dimension's digits grow with the vocabulary too
        vocab[-1] = "z" * (len(vocab[-1]) + off)
    assert wire(base) == size, wire(base)
    return base


@pytest.mark.parametrize("over", [False, True])
def test_a_registration_is_measured_as_it_is_sent(capsys, tmp_path, over):
    """Before: the structural limits were checked on json.dumps' default spacing (", ",
    ": "), so a registration of 520,281 bytes as sent (the compact JSON the worker reads,
    under its 524,288) was refused here as "oversized payload"."""
    from dpstream.schemas.limits import MAX_BYTES
    path = tmp_path / "m.json"
    path.write_text(json.dumps(registration_of(MAX_BYTES + 1 if over else MAX_BYTES), indent=2))
    assert main(["models", "register", str(path), *NOWHERE]) == 1
    line = one_line(capsys)
    if over:
        assert line == ("dpstream models: the registration of big would be dead-lettered: oversized "
                        "payload: a record has at most 524,288 bytes (a structural limit, docs/limits.md); "
                        "nothing sent")
    else:                                   # checked, then on to the broker (none here)
        assert line.startswith("dpstream models: cannot reach the Kafka broker at 127.0.0.1:1"), line


def test_register_no_check_skips_the_broker_read_and_sends_the_compact_bytes(capsys, tmp_path, kafka_bootstrap):
    """Before: `--no-check`, which docs/limits.md names, was an unknown flag of `models`.
    It skips only the read of the registrations in force; the config is still validated
    (an invalid one is refused, nothing sent)."""
    import uuid

    from dpstream.schemas.limits import MAX_BYTES
    from dpstream.streams.tools.topicread import read_to_end
    from dpstream.streams.worker.kafka import Kafka
    prefix = f"edges-{uuid.uuid4().hex[:8]}-"
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**registration_of(1000), "budget": {"epsilon": -1, "delta": 1e-6}}))
    assert main(["models", "register", str(path), "--no-check", "--bootstrap-server", kafka_bootstrap,
                 "--prefix", prefix]) == 1
    assert one_line(capsys) == f"dpstream models: {path}: budget.epsilon: Input should be greater than 0 (got -1)"
    path.write_text(json.dumps(registration_of(MAX_BYTES), indent=2))
    assert main(["models", "register", str(path), "--no-check", "--bootstrap-server", kafka_bootstrap,
                 "--prefix", prefix]) == 0
    out, err = capsys.readouterr()
    assert out == f"dpstream models: registration of big (continual_winnow) sent; refusals appear on {prefix}rejected\n"
    assert "--no-check: the registrations in force were not read" in err
    import asyncio
    [record] = asyncio.run(read_to_end(Kafka(kafka_bootstrap), prefix + "models", timeout=5))
    assert len(record.value) == MAX_BYTES and b", " not in record.value[:200]


def test_a_cancelled_feed_stops_at_the_next_batch_not_at_the_end():
    """Ctrl-C on ``run`` and ``demo`` is asyncio.run cancelling the feed; a batch of cheap
    events never suspends, so before the feed yielded between batches the cancellation
    took effect only after the last one (a newcomer's Ctrl-C waited for the whole input)."""
    import asyncio

    from dpstream.mechanisms.randomness import KeyedRandomness
    from dpstream.streams.tools.embedded import EmbeddedRuntime
    model = json.loads((ROOT / "examples" / "card-fraud.model.json").read_text())
    examples = [json.loads(line) for line in (ROOT / "examples" / "card-fraud.examples.jsonl").open()]
    rt = EmbeddedRuntime(KeyedRandomness(bytes.fromhex(KEY_HEX)))
    items = [("models", model)] + [("examples", e) for e in examples[: 4 * rt.BATCH]]
    fed = []

    async def feed():
        task = asyncio.current_task()

        def progress(n):
            fed.append(n)
            task.cancel()                    # what asyncio.run's SIGINT handler does
        await rt.feed_all(items, progress)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(feed())
    assert sum(fed) == rt.BATCH < len(items)


def test_an_interrupted_run_says_so_and_writes_nothing(capsys, tmp_path, monkeypatch):
    from dpstream.streams.tools.embedded import EmbeddedRuntime

    async def interrupted(self, items, progress=None):
        raise KeyboardInterrupt
    monkeypatch.setattr(EmbeddedRuntime, "feed_all", interrupted)
    out = tmp_path / "out"
    assert main(["run", "--models", str(ROOT / "examples" / "card-fraud.model.json"), "--examples",
                 str(ROOT / "examples" / "card-fraud.examples.jsonl"), "--out", str(out), "--quiet",
                 "--state", str(tmp_path / "state.db")]) == 130
    assert one_line(capsys) == (f"dpstream run: interrupted: nothing written, nothing of this run "
                                f"kept in {tmp_path / 'state.db'}")
    assert not out.exists()


def test_models_takes_its_file_or_id_after_an_option(capsys, tmp_path):
    """argparse matched the optional FILE|ID only before the first option: ``models register
    --bootstrap-server B FILE`` (a newcomer's order) was refused as unrecognised."""
    bad = tmp_path / "m.json"
    bad.write_text('{"model_id": "m",}')
    assert main(["models", "register", *NOWHERE, str(bad)]) == 1
    assert one_line(capsys) == f"dpstream models: {bad}: not JSON at line 1, column 18: " \
        "Expecting property name enclosed in double quotes"
    with pytest.raises(SystemExit):
        main(["models", "register", *NOWHERE, str(bad), "extra"])
    assert "unrecognized arguments: " + f"{bad} extra" in capsys.readouterr().err


@pytest.mark.parametrize("text, where", [
    ('{\n  "model_id": "m",\n}\n', "line 3, column 1"),             # one object over many lines
    ('{"model_id": "m"}\n{"model_id": "n",}\n', "line 2, column 18"),  # JSONL
])
def test_run_refuses_a_models_file_that_is_not_json_before_running(capsys, tmp_path, text, where):
    """Before, the run went on: every example dead-lettered, and 'registration at
    models:0:0 refused: malformed JSON' said neither file nor place."""
    (tmp_path / "m.json").write_text(text)
    out = tmp_path / "out"
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples",
                 str(ROOT / "examples" / "card-fraud.examples.jsonl"), "--out", str(out), "--quiet"]) == 2
    assert one_line(capsys) == f"dpstream run: {tmp_path / 'm.json'}: not JSON at {where}: Expecting " \
        "property name enclosed in double quotes; nothing run"
    assert not out.exists()


def test_an_internal_report_refuses_a_directory_others_may_open(capsys, tmp_path):
    """The README promises the internal report 0600 in a 0700 directory; ``--out report/
    --internal`` after the public ``--out report/`` (0755) replaced the shared report.html
    with the private one there. Refused now; a new directory is made 0700."""
    out = tmp_path / "out"
    assert main(["run", "--models", str(ROOT / "examples" / "card-fraud.model.json"), "--queries",
                 str(ROOT / "examples" / "card-fraud.queries.jsonl"), "--out", str(out), "--quiet"]) == 0
    public = tmp_path / "report"
    assert main(["audit-report", "--dir", str(out), "--out", str(public)]) == 0
    before = (public / "report.html").read_bytes()
    capsys.readouterr()
    assert main(["audit-report", "--dir", str(out), "--out", str(public), "--internal"]) == 2
    assert one_line(capsys) == (f"dpstream audit-report: --out {public}: other users may open it (mode "
                                f"{stat.S_IMODE(public.stat().st_mode):04o}); an internal report goes in a "
                                "directory only you can open: give a new directory (it is created 0700), "
                                f"or chmod 700 {public}")
    assert (public / "report.html").read_bytes() == before
    assert main(["audit-report", "--dir", str(out), "--out", str(tmp_path / "internal"), "--internal"]) == 0
    assert stat.S_IMODE((tmp_path / "internal").stat().st_mode) == 0o700


def credit_model(tmp_path, capsys) -> Path:
    assert main(["features", "--sample", str(ROOT / "examples" / "credit.sample.csv")]) == 0
    features = json.loads(capsys.readouterr().out)
    path = tmp_path / "credit.model.json"
    path.write_text(json.dumps({"model_id": "credit", "budget": {"epsilon": 2.0, "delta": 1e-6},
                                "params": {"kind": "dp_ftrl", "horizon": 5000}, "features": features}))
    return path


def test_a_misspelt_header_is_refused_before_anything_is_run(capsys, tmp_path):
    """A newcomer's 'Income' for the declared 'income': 5,000 records went to the worker
    with every income in the missing slot (produce cannot take them back), the report's
    two lines easy to miss. Refused now, naming both; the right header runs."""
    model = credit_model(tmp_path, capsys)
    lines = (ROOT / "examples" / "credit.examples.csv").read_text().splitlines()
    (tmp_path / "hdr.csv").write_text("\n".join([lines[0].replace("income", "Income"), *lines[1:50]]) + "\n")
    run = ["run", "--models", str(model), "--model-id", "credit", "--label-column", "defaulted", "--quiet"]
    assert main([*run, "--examples", str(tmp_path / "hdr.csv"), "--out", str(tmp_path / "o")]) == 2
    assert one_line(capsys) == ("dpstream run: model credit declares 'income', missing from every record, "
                                "and the file has a column 'Income' no model declares: rename the column "
                                "'income' (or declare it); nothing run")
    assert not (tmp_path / "o").exists()
    (tmp_path / "ok.csv").write_text("\n".join(lines[:50]) + "\n")
    assert main([*run, "--examples", str(tmp_path / "ok.csv"), "--out", str(tmp_path / "o")]) == 0


def test_features_on_a_table_without_its_label_column_names_the_likely_label(capsys):
    """``features --sample`` on a file of examples declared the 0/1 label 'defaulted' a
    feature without a word (the default --label-column is y); a sample without labels
    still says nothing of it."""
    assert main(["features", "--sample", str(ROOT / "examples" / "credit.examples.csv")]) == 0
    err = capsys.readouterr().err
    assert "no column 'y' (--label-column): every column is taken as a feature; if the label is one " \
        "of 'defaulted', give --label-column NAME" in err, err
    assert main(["features", "--sample", str(ROOT / "examples" / "credit.examples.csv"),
                 "--label-column", "defaulted"]) == 0
    declared = [f["name"] for f in json.loads(capsys.readouterr().out)]
    assert "defaulted" not in declared and "income" in declared
    assert main(["features", "--sample", str(ROOT / "examples" / "credit.sample.csv")]) == 0
    assert "--label-column" not in capsys.readouterr().err


def test_produce_points_a_pretty_printed_model_file_at_models_register(capsys, tmp_path):
    """``produce --topic models`` sends JSONL; a model file as ``models register`` takes it
    (one object over many lines) was called 'malformed JSON' at line 1."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps(json.loads((ROOT / "examples" / "card-fraud.model.json").read_text()), indent=2))
    assert main(["produce", "--topic", "models", "--file", str(path), *NOWHERE]) == 2
    assert one_line(capsys) == (f"dpstream produce: {path} is one JSON document over many lines, and produce "
                                "sends one record per line (JSONL): register a model file with `dpstream "
                                f"models register {path}` (a JSON document, a list, or JSONL)")


def test_run_refuses_a_models_file_that_is_not_utf8_in_one_line(capsys, tmp_path):
    """A reviewer's pass: the not-JSON refusal read a line and column that a decoding error
    does not have, and a Latin-1 model file gave a traceback."""
    (tmp_path / "m.jsonl").write_bytes(b'{"model_id": "caf\xe9"}\n')
    assert main(["run", "--models", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert one_line(capsys) == f"dpstream run: {tmp_path / 'm.jsonl'}: not JSON at line 1: not UTF-8 text; nothing run"


@pytest.mark.parametrize("cell", ["nan", "1e999", "-inf", "1" + "0" * 400])
def test_a_dense_models_csv_cell_that_is_no_finite_number_is_refused_before_running(capsys, tmp_path, monkeypatch,
                                                                                     cell):
    """Before: a CSV cell of NaN, an infinity or an integer beyond float64 reached the agents
    as dense x and was dead-lettered (while a cell of text was refused here)."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    model = {"model_id": "d", "dimension": 2, "budget": {"epsilon": 2.0, "delta": 1e-6},
             "params": {"kind": "dp_ftrl", "horizon": 100}}
    (tmp_path / "m.json").write_text(json.dumps(model))
    (tmp_path / "e.csv").write_text(f"a,b,y\n0.5,0.1,1\n{cell},0.2,-1\n")
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.csv"),
                 "--model-id", "d", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "row 3: model d takes dense x, and a feature cell is not a finite number" in err
    assert cell[:6] not in err and not (tmp_path / "out").exists()


def test_a_dense_models_csv_with_more_feature_columns_than_its_dimension_is_refused_before_running(
        capsys, tmp_path, monkeypatch):
    """Before: every row was sent with x of 3 entries to a model of dimension 2 and
    dead-lettered ("wrong dimension"), also under --strict."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    model = {"model_id": "d", "dimension": 2, "budget": {"epsilon": 2.0, "delta": 1e-6},
             "params": {"kind": "dp_ftrl", "horizon": 100}}
    (tmp_path / "m.json").write_text(json.dumps(model))
    (tmp_path / "e.csv").write_text("a,b,extra,y\n0.5,0.1,0,1\n-0.2,0.3,0,-1\n")
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.csv"),
                 "--model-id", "d", "--out", str(tmp_path / "out")]) == 2
    assert ("model d takes dense x of 2 entries, and the file has 3 feature columns (a, b, extra)"
            in capsys.readouterr().err) and not (tmp_path / "out").exists()


def test_parquet_cells_json_has_no_type_for_become_numbers_or_text_or_one_line():
    """Before: a Parquet date, decimal or binary cell stopped run and produce with a
    traceback (json.dumps). ``_json_cell`` is what ``read_table`` applies to every cell."""
    import datetime
    import decimal

    from dpstream.streams.tools.userfiles import FileError, _json_cell
    assert _json_cell("f", "c", decimal.Decimal("12.50")) == 12.5
    assert _json_cell("f", "c", datetime.datetime(2020, 1, 2, 3, 4)) == "2020-01-02T03:04:00"
    assert _json_cell("f", "c", datetime.date(2020, 1, 2)) == "2020-01-02"
    assert _json_cell("f", "c", datetime.timedelta(minutes=2)) == 120.0
    assert _json_cell("f", "c", [decimal.Decimal("1"), {"k": datetime.time(1, 2)}]) == [1.0, {"k": "01:02:00"}]
    assert _json_cell("f", "c", None) is None and _json_cell("f", "c", True) is True
    import numpy as np
    assert _json_cell("f", "c", np.float16(1.5)) == 1.5 and _json_cell("f", "c", np.int8(3)) == 3
    assert _json_cell("f", "c", [("k", decimal.Decimal("2"))]) == [["k", 2.0]]
    with pytest.raises(FileError, match=r"column 'c' holds bytes values, which JSON has no type for") as err:
        _json_cell("f", "c", b"secret-bytes")
    assert "secret" not in str(err.value)


def test_a_horizon_rounded_up_to_the_block_is_said_at_registration(capsys, tmp_path, monkeypatch):
    """Before: dp_ftrl with horizon 1 and block 1,000 registered and ran epochs of 1,000
    examples without a word. The worker still runs it so (a change would break the
    replay of old exports); ``run`` and ``models register`` say it."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    model = {"model_id": "d", "dimension": 2, "budget": {"epsilon": 2.0, "delta": 1e-6},
             "params": {"kind": "dp_ftrl", "horizon": 1, "block": 1000}}
    (tmp_path / "m.json").write_text(json.dumps(model))
    (tmp_path / "e.jsonl").write_text(json.dumps({"model_id": "d", "x": [0.5, 0.1], "y": 1}) + "\n")
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.jsonl"),
                 "--out", str(tmp_path / "out")]) == 0
    assert ("dpstream run: model d: horizon 1 is rounded up to 1,000, a multiple of its block of 1,000 "
            "examples: each epoch is 1,000 examples") in capsys.readouterr().err
    model["params"] = {"kind": "dp_ftrl", "horizon": 1000, "block": 100}
    (tmp_path / "m.json").write_text(json.dumps(model))
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.jsonl"),
                 "--out", str(tmp_path / "out2")]) == 0
    assert "rounded up" not in capsys.readouterr().err


@pytest.mark.parametrize("params,says", [
    ({}, "model p: generator 'halfspace' (the default: the seed's LP per block) answered below "
         "the majority class on 5 of 8 real data sets, where \"generator\": \"nearest\" answered "
         "above it on 7 (both with \"student\": true"),
    ({"generator": "nearest", "student": False, "epochs": False}, "then nothing more (\"epochs\": false)"),
    ({"generator": "nearest", "student": False}, "model p: without \"student\": true it answers "
                                                 "until its v_max hard queries are spent"),
    ({"generator": "halfspace", "student": False}, "without \"student\": true"),
    ({"generator": "logistic"}, "model p: logistic blocks take each hard query as one example "
                                "(hard_query_weight 1, the default); with a student, 0 answered better"),
    ({"generator": "halfspace"}, None),
    ({"generator": "logistic", "hard_query_weight": 0}, None),
    ({"generator": "nearest"}, None)])
def test_a_predictor_left_at_a_weak_default_is_told_the_measured_choice(capsys, tmp_path, monkeypatch,
                                                                      params, says):
    """A newcomer's predictor with no generator got the seed's halfspace LP, which answered
    below the majority class on 5 of 8 real sets (bench/predictor_real.py), without a
    word; ``run`` now says so, and says nothing once the choice is made. The default
    itself stays (a running model reads it when it loads)."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    model = {"model_id": "p", "dimension": 2, "budget": {"epsilon": 4.0, "delta": 1e-6},
             "params": {"kind": "predictor", "examples": 1200, "student": True, **params}}
    (tmp_path / "m.json").write_text(json.dumps(model))
    (tmp_path / "e.jsonl").write_text(json.dumps({"model_id": "p", "x": [0.5, 0.1], "y": 1}) + "\n")
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.jsonl"),
                 "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    if says:
        assert says in err and err.count("dpstream run: model p: ") >= 1
    else:
        assert "answered below the majority" not in err and "hard_query_weight" not in err \
            and "without \"student\"" not in err


def test_run_says_why_queries_got_no_label(capsys, tmp_path, monkeypatch):
    """A newcomer's pass: a predictor registered for 1,200 examples per epoch and sent 100
    answered none of its queries (all ``learning``), exit 0, without a word. ``run`` now
    says how many queries got no label, by status, and what the first one waits for."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    model = {"model_id": "p", "dimension": 2, "budget": {"epsilon": 4.0, "delta": 1e-6},
             "params": {"kind": "predictor", "generator": "nearest", "student": True, "examples": 1200}}
    (tmp_path / "m.json").write_text(json.dumps(model))
    (tmp_path / "e.jsonl").write_text("".join(json.dumps({"model_id": "p", "x": [i / 100, 0.1], "y": 1}) + "\n"
                                              for i in range(100)))
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"model_id": "p", "x": [0.5, 0.1]}) + "\n"
                                              for _ in range(7)))
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.jsonl"),
                 "--queries", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "out")]) == 0
    assert ("dpstream run: model p: 7 of 7 queries got no label (learning 7); learning: its first epoch "
            "starts once 1,200 labelled examples have arrived (120 blocks of 10") in capsys.readouterr().err
    model["params"] = {"kind": "dp_ftrl", "horizon": 1000}      # answers from the first query
    (tmp_path / "m.json").write_text(json.dumps(model))
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.jsonl"),
                 "--queries", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "out2")]) == 0
    assert "got no label" not in capsys.readouterr().err


def test_the_no_label_line_reads_the_registration_in_force_not_the_first_in_the_file(capsys, tmp_path,
                                                                                    monkeypatch):
    """A reviewer's pass: the line quoted the first registration of the file for the id, a
    refused one (100 examples per epoch), when a later one was in force (1,200)."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    base = {"model_id": "p", "dimension": 2, "budget": {"epsilon": 4.0, "delta": 1e-6}}
    refused = {**base, "params": {"kind": "predictor", "generator": "nearest", "student": True, "examples": 100}}
    taken = {**base, "params": {"kind": "predictor", "generator": "nearest", "student": True, "examples": 1200}}
    (tmp_path / "m.jsonl").write_text(json.dumps(refused) + "\n" + json.dumps(taken) + "\n")
    (tmp_path / "q.jsonl").write_text(json.dumps({"model_id": "p", "x": [0.5, 0.1]}) + "\n")
    assert main(["run", "--models", str(tmp_path / "m.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--out", str(tmp_path / "out")]) == 1                       # the first was refused
    err = capsys.readouterr().err
    assert "refused" in err and "starts once 1,200 labelled examples have arrived" in err
    assert "starts once 100 " not in err


@pytest.mark.kafka
def test_consume_into_head_stops_quietly_with_141(kafka_bootstrap, topic_prefix):
    """``dpstream consume ... | head -n 1``: the reader leaves after one record and the
    command ends as a tool killed by SIGPIPE does (141, nothing on stderr), as
    kafka-console-consumer and kcat do. Before, its BrokenPipeError was taken for a broker
    failure: exit 1, "cannot reach the Kafka broker ... (BrokenPipeError)"."""
    import asyncio
    import subprocess
    import sys

    from .kafka_helpers import create_topic, produce
    topic = f"{topic_prefix}-predictions"
    asyncio.run(create_topic(kafka_bootstrap, topic, 1))
    # far beyond a pipe's buffer (64 KiB), so the writes after the reader left fail
    asyncio.run(produce(kafka_bootstrap, topic, ({"model_id": "m", "seq": i, "pad": "x" * 200}
                                                 for i in range(2000))))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    proc = subprocess.Popen([sys.executable, "-m", "dpstream.streams.cli", "consume", "--bootstrap-server",
                             kafka_bootstrap, "--prefix", f"{topic_prefix}-", "--topic", "predictions",
                             "--from-beginning", "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert json.loads(proc.stdout.readline())["seq"] == 0
    proc.stdout.close()                    # as `| head -n 1` does
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 141 and err == "", err
