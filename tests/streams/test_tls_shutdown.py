"""The one asyncio report the CLI drops: a TLS close-notify race at connection teardown."""
import asyncio
import io
import logging
import ssl

from dpstream.streams.worker.kafka import TLSShutdownRace, quiet_tls_shutdown


def _reported(loop, err) -> str:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    log = logging.getLogger("asyncio")
    log.addHandler(handler)
    try:
        loop.call_exception_handler({"message": "Future exception was never retrieved", "exception": err})
    finally:
        log.removeHandler(handler)
    return buf.getvalue()


def test_only_the_close_notify_race_is_dropped_and_the_filter_is_installed_once():
    """A CI run printed asyncio's "Future exception was never retrieved" traceback for an
    SSLError APPLICATION_DATA_AFTER_CLOSE_NOTIFY after ``models register`` had said, in one
    line, that the producer may not write the models topic. That report is dropped; any
    other SSL error, or any other unretrieved exception, is still reported."""
    quiet_tls_shutdown()
    quiet_tls_shutdown()
    assert sum(isinstance(f, TLSShutdownRace) for f in logging.getLogger("asyncio").filters) == 1
    loop = asyncio.new_event_loop()
    try:
        race = ssl.SSLError(1, "[SSL: APPLICATION_DATA_AFTER_CLOSE_NOTIFY] application data after close notify")
        race.reason = "APPLICATION_DATA_AFTER_CLOSE_NOTIFY"
        assert _reported(loop, race) == ""
        other = ssl.SSLError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
        other.reason = "CERTIFICATE_VERIFY_FAILED"
        assert "Future exception was never retrieved" in _reported(loop, other)
        assert "ValueError" in _reported(loop, ValueError("x"))
    finally:
        loop.close()
