"""Keyed, replayable, cryptographically secure randomness: the only source of noise.

Design (docs/privacy.md, "Keyed randomness"):

* A secret key (at least 32 random bytes, given as hex in a file or an environment
  variable, never on a topic or a flag) is expanded per model with HKDF-SHA256 (info = model id), then per
  ``(purpose, counter)`` with HMAC-SHA256 into a 256-bit ChaCha20 key. The
  ChaCha20 keystream (``cryptography`` package, zero nonce: every stream has its
  own key, so a nonce is never reused) is the stream's random bytes.
* Same (key, model, purpose, counter): the same bytes, on any machine and process.
  Distinct purposes or counters: independent streams (PRF security of HMAC).
* numpy turns the bytes into uniforms, bits and exact bounded integers in bulk.

There is no fallback to OS randomness: without a key, :func:`KeyedRandomness.from_env`
raises :class:`MissingKeyError`. Tests pass an explicit test key.

Key policy: the key's public fingerprint (on every ledger entry) would let anyone test
guessed passphrases offline, so only high-entropy keys are accepted: at least 32 bytes,
and from the environment or a file only as at least 64 hex digits (e.g.
``python3 -c 'import secrets; print(secrets.token_hex(32))'``). No passphrase path.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import os
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import MissingKeyError, ParameterError

KEY_ENV = "DPSTREAM_SECRET_KEY"
KEY_FILE_ENV = "DPSTREAM_SECRET_KEY_FILE"
MIN_KEY_BYTES = 32
MIN_DISTINCT_BYTES = 8     # a key from the environment or a file with fewer is not random
_MAX_U64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_CHUNK = 1 << 14  # keystream bytes fetched per refill for small reads
_ZEROS = memoryview(bytes(1 << 20))   # plaintext: the keystream is ChaCha20 of zeros


def _encode_counter(counter: int | tuple[int, ...]) -> bytes:
    parts = counter if isinstance(counter, tuple) else (counter,)
    out = bytearray()
    for part in parts:
        if not 0 <= int(part) < 2**64:
            raise ParameterError("counter", counter, "non-negative integers below 2**64")
        out += int(part).to_bytes(8, "big")
    return bytes(out)


class KeyedRandomness:
    """Derives independent deterministic streams from one secret key.

    >>> rng = KeyedRandomness(b"test-key-0123456789abcdef0000000")
    >>> a = rng.stream("m1", "noise", 0).uniform(3)
    >>> bool((a == rng.stream("m1", "noise", 0).uniform(3)).all())
    True
    """

    def __init__(self, secret: bytes):
        if not isinstance(secret, (bytes, bytearray)) or len(secret) < MIN_KEY_BYTES:
            raise ParameterError("secret", "<redacted>", f"at least {MIN_KEY_BYTES} bytes of key material")
        self._secret = bytes(secret)
        self._model_keys: dict[str, bytes] = {}

    def __repr__(self) -> str:  # never show the key
        return f"KeyedRandomness(fingerprint={self.fingerprint()})"

    def __reduce__(self):
        """A pickle holds the key's public fingerprint, never the key (nor a model key
        derived from it): loading it takes the key from the environment again
        (``from_env``) and refuses one with another fingerprint. Before, pickling a
        library model (River users save models with pickle) wrote the secret key into
        the file, which would recompute the noise of every model under that key."""
        return (_from_env_with, (self.fingerprint(),))

    def __deepcopy__(self, memo) -> "KeyedRandomness":
        return self              # immutable but for a cache of derived keys: shared

    @staticmethod
    def configured(environ: dict | None = None) -> bool:
        """Whether a key is configured at all (usable or not): the only case in which a
        command may do without one (the demo's public key, a keyless audit report). A
        configured key that cannot be used is refused, never replaced."""
        env = os.environ if environ is None else environ
        return bool(env.get(KEY_ENV) or env.get(KEY_FILE_ENV))

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "KeyedRandomness":
        """Key from ``$DPSTREAM_SECRET_KEY`` (hex) or the file named by
        ``$DPSTREAM_SECRET_KEY_FILE`` (hex); raises :class:`MissingKeyError` otherwise."""
        env = os.environ if environ is None else environ
        value = env.get(KEY_ENV)
        if env.get(KEY_FILE_ENV):
            rng = cls.from_file(env[KEY_FILE_ENV])
            if value and not hmac.compare_digest(_decode_key(value.strip()), rng._secret):
                # which one would win is a guess a user should not have to make: the noise,
                # and every later replay, depend on it
                raise MissingKeyError(f"{KEY_ENV} and the file {KEY_FILE_ENV} names hold different "
                                      "keys: set one of them (or both to the same key)")
            return rng
        if not value:
            raise MissingKeyError(
                f"no secret key: set {KEY_ENV} or {KEY_FILE_ENV}; dpstream never falls back "
                "to unkeyed randomness because replay and audits need the key")
        return cls(_decode_key(value.strip()))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "KeyedRandomness":
        """The key in a file that is yours and readable by you alone (as ssh keys are):
        before, a key file other local users could read, or one another user owned (and
        so could swap for a key they know), was taken as it was."""
        p = Path(path)
        if not p.is_file():       # before, a directory was also said not to exist
            what = ("is a directory: name the file in it that holds the key" if p.is_dir() else
                    "is not a regular file" if p.exists() else "does not exist")
            raise MissingKeyError(f"secret key file {str(p)!r} {what}")
        st = p.stat()
        if st.st_uid != os.geteuid():
            raise MissingKeyError(f"secret key file {str(p)!r} belongs to uid {st.st_uid}, not to "
                                  "you: its owner could read it or swap in a key they know")
        if st.st_mode & 0o077:
            raise MissingKeyError(f"secret key file {str(p)!r} is open to other users (mode "
                                  f"{st.st_mode & 0o777:04o}): chmod 600 it")
        try:
            text = p.read_bytes().decode("ascii")
        except UnicodeDecodeError as err:      # a raw binary key, or another file: never shown
            raise MissingKeyError(
                f"secret key file {str(p)!r} is not text (byte {err.start + 1} is not ASCII): it "
                f"holds the key as {2 * MIN_KEY_BYTES}+ hex digits, e.g. python3 -c 'import secrets; "
                "print(secrets.token_hex(32))'") from None
        return cls(_decode_key(text.strip()))

    def fingerprint(self) -> str:
        """A public, non-invertible identifier of the key (ledger entries carry it so that
        replay can reject a wrong key at once). Safe for random keys of >= 128 bits; a
        guessable passphrase could be tested against it offline, so use random keys."""
        return hashlib.sha256(b"dpstream-fingerprint\x00" + self._secret).hexdigest()[:16]

    def model_key(self, model_id: str) -> bytes:
        key = self._model_keys.get(model_id)
        if key is None:
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"dpstream-v1",
                       info=b"model\x00" + model_id.encode()).derive(self._secret)
            self._model_keys[model_id] = key
        return key

    def stream(self, model_id: str, purpose: str, counter: int | tuple[int, ...]) -> "RandomStream":
        """The stream for one (model, purpose, counter); purpose must not contain NUL."""
        return RandomStream(self.stream_key(model_id, purpose, counter))

    def stream_key(self, model_id: str, purpose: str, counter: int | tuple[int, ...]) -> bytes:
        """The 32-byte ChaCha20 key of ``stream(model_id, purpose, counter)``: it opens that
        one stream only (an HMAC of the model key), so a helper process that draws it
        ahead is handed this, never the secret."""
        if "\x00" in purpose:
            raise ParameterError("purpose", purpose, "a string without NUL characters")
        label = purpose.encode() + b"\x00" + _encode_counter(counter)
        return hmac.new(self.model_key(model_id), label, hashlib.sha256).digest()


_LOADING: contextvars.ContextVar[KeyedRandomness | None] = contextvars.ContextVar("_LOADING", default=None)


@contextlib.contextmanager
def loading_key(key: bytes):
    """Unpickle with ``key`` instead of the environment's: for a model made with ``key=``
    bytes (learners/online.py), whose pickle holds only the key's fingerprint. Loading
    still refuses a key with another fingerprint.

    >>> import pickle
    >>> blob = pickle.dumps(KeyedRandomness(bytes(range(32))))
    >>> with loading_key(bytes(range(32))):
    ...     pickle.loads(blob).fingerprint() == KeyedRandomness(bytes(range(32))).fingerprint()
    True
    """
    token = _LOADING.set(KeyedRandomness(key))
    try:
        yield
    finally:
        _LOADING.reset(token)


def loading() -> KeyedRandomness | None:
    """The key ``loading_key`` gives, inside its block (else None)."""
    return _LOADING.get()


def _from_env_with(fingerprint: str) -> KeyedRandomness:
    """The key ``loading_key`` gives, else the environment's, if its fingerprint is
    ``fingerprint`` (unpickling)."""
    given = _LOADING.get()
    if given is not None:
        if given.fingerprint() != fingerprint:
            raise MissingKeyError(f"this object was saved with the key of fingerprint {fingerprint}, "
                                  f"loading_key's has {given.fingerprint()}: give the key it was made with")
        return given
    try:
        rng = KeyedRandomness.from_env()
    except MissingKeyError as err:
        raise MissingKeyError(f"this object was saved without its secret key (fingerprint "
                              f"{fingerprint}); to load it, {err} (or load it inside "
                              "`with dpstream.mechanisms.randomness.loading_key(key):`)") from None
    if rng.fingerprint() != fingerprint:
        raise MissingKeyError(f"this object was saved with the key of fingerprint {fingerprint}, "
                              f"the environment's has {rng.fingerprint()}: set {KEY_ENV} or "
                              f"{KEY_FILE_ENV} to the key it was made with (or load it inside "
                              "`with dpstream.mechanisms.randomness.loading_key(key):`)")
    return rng


def _decode_key(text: str) -> bytes:
    """At least 32 bytes as hex digits (whitespace between bytes allowed, as ``xxd -p``
    wraps them and ``od`` spaces them); anything else (a passphrase) is refused, and so
    are two keys: ``bytes.fromhex`` skips whitespace, so a file a key was appended to
    twice read as one new 64-byte key, silently."""
    words = text.split()
    if sum(len(w) >= 2 * MIN_KEY_BYTES and _is_hex(w) for w in words) > 1:
        raise MissingKeyError("the secret key holds two or more keys (one appended to another?): "
                              "keep the one the model was made with")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) >= MIN_KEY_BYTES and len(set(raw)) < MIN_DISTINCT_BYTES:
        raise MissingKeyError(
            f"the secret key has {len(set(raw))} distinct byte values: it is not random (32 "
            f"random bytes have fewer than {MIN_DISTINCT_BYTES} with probability below 1e-20); "
            "make one with python3 -c 'import secrets; print(secrets.token_hex(32))'")
    if len(raw) < MIN_KEY_BYTES:
        raise MissingKeyError(
            f"the secret key must be at least {MIN_KEY_BYTES} random bytes written as hex "
            f"({2 * MIN_KEY_BYTES}+ hex digits), e.g. python3 -c 'import secrets; "
            "print(secrets.token_hex(32))'; passphrases are refused (the public key "
            "fingerprint would let anyone test guesses offline)")
    return raw


def _is_hex(word: str) -> bool:
    try:
        bytes.fromhex(word)
    except ValueError:
        return False
    return True


class RandomStream:
    """A ChaCha20 keystream with vectorised conversions. Consumption is sequential:
    the n-th call always sees the same bytes given the same earlier calls (how the
    keystream is buffered does not change which bytes a call gets)."""

    __slots__ = ("_enc", "_buf", "_pos")

    def __init__(self, key32: bytes):
        self._enc = Cipher(algorithms.ChaCha20(key32, b"\x00" * 16), mode=None).encryptor()
        self._buf = b""
        self._pos = 0

    def bytes(self, n: int) -> bytes:
        avail = len(self._buf) - self._pos
        if n > avail:
            if n - avail >= _CHUNK:
                return self._read(n).tobytes()
            self._buf = self._buf[self._pos:] + self._enc.update(_ZEROS[:_CHUNK])
            self._pos = 0
        out = self._buf[self._pos:self._pos + n]
        self._pos += n
        return out

    def _read(self, n: int) -> np.ndarray:
        """The next n bytes as a new uint8 array. A large read takes what is buffered,
        then has the keystream written straight into the array (``update_into``, no
        intermediate copies); a small one goes through the buffer."""
        avail = len(self._buf) - self._pos
        if n - avail < _CHUNK:
            return np.frombuffer(self.bytes(n), dtype=np.uint8).copy()
        out = np.empty(n, dtype=np.uint8)
        out[:avail] = np.frombuffer(self._buf, dtype=np.uint8, count=avail, offset=self._pos)
        self._buf, self._pos = b"", 0
        view, at = memoryview(out), avail
        while at < n:
            step = min(n - at, len(_ZEROS))
            self._enc.update_into(_ZEROS[:step], view[at:at + step])
            at += step
        return out

    def uint64(self, n: int) -> np.ndarray:
        return self._read(8 * n).view("<u8").astype(np.uint64, copy=False)

    def uint32(self, n: int) -> np.ndarray:
        return self._read(4 * n).view("<u4").astype(np.uint32, copy=False)

    def uniform(self, n: int) -> np.ndarray:
        """Uniforms on the 2**-53 grid in [0, 1) (for statistics, never for exact samplers)."""
        return (self.uint64(n) >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)

    def bits(self, n: int) -> np.ndarray:
        return np.unpackbits(np.frombuffer(self.bytes((n + 7) // 8), dtype=np.uint8))[:n].astype(bool)

    def below(self, bounds: np.ndarray | int, size: int | None = None) -> np.ndarray:
        """Exactly uniform integers in [0, bound) per lane, by rejection on 64-bit words.

        A word u is kept when u < 2**64 - (2**64 mod bound), a multiple of bound, so
        u mod bound is exactly uniform. Bounds must lie in [1, 2**63].
        """
        b = np.asarray(bounds, dtype=np.uint64)
        if size is not None:
            b = np.broadcast_to(b, (size,))
        b = np.ascontiguousarray(b).ravel()
        if b.size and (b.min() < 1 or b.max() > np.uint64(2**63)):
            raise ParameterError("bounds", f"[{b.min()}, {b.max()}]", "integers in [1, 2**63]")
        out = np.empty(b.size, dtype=np.uint64)
        todo = np.arange(b.size)
        while todo.size:
            bt = b[todo]
            u = self.uint64(todo.size)
            rem = (_MAX_U64 % bt + np.uint64(1)) % bt      # 2**64 mod bound
            ok = u <= _MAX_U64 - rem
            out[todo[ok]] = u[ok] % bt[ok]
            todo = todo[~ok]
        return out.astype(np.int64)
