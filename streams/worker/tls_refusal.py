"""What TLS verification refused about a broker's certificate, in one line (issue 41, item 11).

Before, a hostname mismatch, an expired certificate and an unknown CA all read "set
ssl.ca.location to the CA that signed it", which is the fix for one of the three only.
The reason comes from OpenSSL's verify result: ``ssl.SSLCertVerificationError``'s
``verify_code`` / ``verify_message`` when the error reaches us, else the text aiokafka
logged for a failed bootstrap ("certificate verify failed: <verify message>"). The codes
are OpenSSL's X509_V_ERR_* (x509_vfy.h): 62 hostname and 64 IP address mismatch, 10
expired, 9 not yet valid, 2/18/19/20/21 an issuer not among the trusted CAs.

For the specifics (the names the certificate is for, its dates, its issuer) a command
that runs no event loop reads the certificate once more without verifying it
(``peer_certificate``: a TLS handshake only, nothing sent) and parses it with
``cryptography``. Those fields come from whoever answered, possibly an attacker, so
they are cut to printable ASCII and a few names. A worker, whose event loop must not
block on a socket, gets the same lines without the specifics.
"""
from __future__ import annotations

import re
import socket
import ssl
from datetime import datetime, timezone

NAME, EXPIRED, NOT_YET, UNKNOWN_CA = "name", "expired", "not yet valid", "unknown CA"
CODES = {62: NAME, 64: NAME, 10: EXPIRED, 9: NOT_YET, 2: UNKNOWN_CA, 18: UNKNOWN_CA,
         19: UNKNOWN_CA, 20: UNKNOWN_CA, 21: UNKNOWN_CA}
PROBE_TIMEOUT = 3.0         # seconds for the second look at the certificate
MAX_NAMES = 6


def tls_refusal(kafka, causes, said: str) -> str | None:
    """The line for a failed certificate verification (None when there was none):
    ``causes``, the exception and its cause and context; ``said``, what aiokafka logged."""
    verify = next((c for c in causes if isinstance(c, ssl.SSLCertVerificationError)), None)
    if verify is None and "CERTIFICATE_VERIFY_FAILED" not in said:
        return None
    message = (getattr(verify, "verify_message", None) or
               _after(said, "certificate verify failed:") or str(verify or ""))
    reason = CODES.get(getattr(verify, "verify_code", None)) or _reason_of(message)
    host, port = _address(kafka.bootstrap, said)
    where = f"{host}:{port}"
    cert = peer_certificate(host, port) if reason is not None and _may_block() else None
    if reason == NAME:
        names = _names(cert)
        said_names = f"is for {', '.join(names)}, not {host}" if names else f"is not for {host}"
        return (f"the broker's certificate at {where} {said_names}: hostname verification refused "
                f"it; connect through a name it lists (--bootstrap-server / bootstrap.servers) or have it "
                f"reissued for {host}")
    if reason == EXPIRED:
        when = f" on {_date(cert.not_valid_after_utc)}" if cert is not None else ""
        return (f"the broker's certificate at {where} expired{when}: TLS verification refused it; "
                "the broker needs a renewed certificate")
    if reason == NOT_YET:
        when = f" before {_date(cert.not_valid_before_utc)}" if cert is not None else " yet"
        return (f"the broker's certificate at {where} is not valid{when} (the clock here says "
                f"{_date(datetime.now(timezone.utc))}): TLS verification refused it; check this "
                "machine's clock or the certificate's dates")
    if reason == UNKNOWN_CA:
        issuer = f"is signed by {_clean(cert.issuer.rfc4514_string())}, " if cert is not None else ""
        trusted = (f"which ssl.ca.location ({kafka.ca_file}) does not hold" if kafka.ca_file
                   else "which this machine's CA store does not hold (no ssl.ca.location set)")
        return (f"the broker's certificate at {where} {issuer or 'comes from a CA '}{trusted}: set "
                "ssl.ca.location to the CA that signed it")
    return f"TLS verification refused the broker's certificate at {where}: {_clean(message)}"


def peer_certificate(host: str, port: int, timeout: float = PROBE_TIMEOUT):
    """The certificate the server at host:port presents (a ``cryptography`` x509
    certificate), read by a handshake that verifies nothing; None when that fails."""
    from cryptography import x509
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            sni = None if _is_ip(host) else host
            with context.wrap_socket(raw, server_hostname=sni) as tls:
                der = tls.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der) if der else None
    except (OSError, ValueError):
        return None


def _names(cert) -> list[str]:
    """The DNS names and IP addresses a certificate is for (its common name when it has no
    subjectAltName), cleaned."""
    if cert is None:
        return []
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n) for n in san.get_values_for_type(x509.DNSName)] + \
                [str(n) for n in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    shown = [_clean(n) for n in names[:MAX_NAMES]]
    return shown + (["..."] if len(names) > MAX_NAMES else [])


def _reason_of(message: str) -> str | None:
    text = message.lower()
    if "mismatch" in text:
        return NAME
    if "expired" in text:
        return EXPIRED
    if "not yet valid" in text:
        return NOT_YET
    if any(s in text for s in ("issuer", "self-signed", "self signed", "verify the first")):
        return UNKNOWN_CA
    return None


def _address(bootstrap: str, said: str) -> tuple[str, int]:
    """The broker whose certificate failed: the address aiokafka names ('Unable connect to
    "host:port"'), else the first bootstrap server."""
    m = re.search(r'connect to "([^"]+)"', said)
    hostport = m.group(1) if m else bootstrap.split(",")[0].strip()
    host, _, port = hostport.rpartition(":")
    try:
        return host.strip("[]") or hostport, int(port)
    except ValueError:
        return hostport, 9092


def _after(text: str, marker: str) -> str:
    i = text.find(marker)
    return "" if i < 0 else re.sub(r"\s*\(_ssl\.c:\d+\).*$", "", text[i + len(marker):].split("\n")[0]).strip()


def _may_block() -> bool:
    """Whether no event loop runs in this thread (a command between asyncio.run calls)."""
    import asyncio
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


def _is_ip(host: str) -> bool:
    import ipaddress
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _date(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M UTC")


def _clean(text: str, limit: int = 80) -> str:
    """A field from a certificate, safe to print: printable ASCII, at most ``limit`` chars."""
    text = re.sub(r"[^\x20-\x7e]", "?", text)
    return text if len(text) <= limit else text[:limit] + "..."
