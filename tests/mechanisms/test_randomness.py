import numpy as np
import pytest
from scipy.stats import chi2

from dpstream.mechanisms.errors import MissingKeyError, ParameterError
from dpstream.mechanisms.randomness import KeyedRandomness, RandomStream


def test_same_key_model_purpose_counter_gives_identical_draws(rng):
    other = KeyedRandomness(b"dpstream-test-key-not-for-production")
    a = rng.stream("model-a", "noise", (3, 7)).uint64(1000)
    b = other.stream("model-a", "noise", (3, 7)).uint64(1000)
    assert np.array_equal(a, b)


def test_chunked_consumption_matches_one_big_read(rng):
    s1, s2 = rng.stream("m", "p", 1), rng.stream("m", "p", 1)
    big = s1.bytes(50_000)
    parts = b"".join(s2.bytes(n) for n in (1, 7, 16384, 3, 33605))
    assert big == parts


@pytest.mark.parametrize("seed", range(3))
def test_reads_of_any_size_and_width_follow_the_chacha20_keystream(rng, seed):
    """Small reads go through the buffer, large ones are written straight into their
    array: either way the n-th byte read is the keystream's n-th byte."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
    key = rng.stream_key("m", "p", seed)
    keystream = Cipher(algorithms.ChaCha20(key, b"\x00" * 16), mode=None).encryptor().update(bytes(8 << 20))
    stream, got, sizes = RandomStream(key), [], np.random.default_rng(seed)
    while sum(map(len, got)) < 5 << 20:
        n = int(sizes.choice([1, 7, 100, 16383, 16384, 16385, 300_000, 1_500_000]))
        kind = int(sizes.integers(3))
        got.append(stream.bytes(n) if kind == 0 else
                   stream.uint64(n // 8 + 1).tobytes() if kind == 1 else stream.uint32(n // 4 + 1).tobytes())
    data = b"".join(got)
    assert data == keystream[:len(data)]


@pytest.mark.parametrize("change", ["model", "purpose", "counter", "key"])
def test_changing_any_input_gives_an_unrelated_stream(rng, change):
    base = rng.stream("m", "p", 0).uint64(20_000)
    other = {
        "model": lambda: rng.stream("m2", "p", 0),
        "purpose": lambda: rng.stream("m", "p2", 0),
        "counter": lambda: rng.stream("m", "p", 1),
        "key": lambda: KeyedRandomness(b"another-key-01234567890000000000").stream("m", "p", 0),
    }[change]().uint64(20_000)
    assert not np.array_equal(base, other)
    # independence: the joint distribution of the top 3 bits of paired words is uniform
    cells = (base >> np.uint64(61)).astype(int) * 8 + (other >> np.uint64(61)).astype(int)
    observed = np.bincount(cells, minlength=64)
    stat = ((observed - 20_000 / 64) ** 2 / (20_000 / 64)).sum()
    assert chi2.sf(stat, 63) > 1e-4


def test_bounded_integers_are_exactly_uniform_for_a_bound_that_does_not_divide_2_64(rng):
    draws = rng.stream("m", "below", 0).below(3, size=90_000)
    counts = np.bincount(draws, minlength=3)
    assert set(np.unique(draws)) == {0, 1, 2}
    stat = ((counts - 30_000) ** 2 / 30_000).sum()
    assert chi2.sf(stat, 2) > 1e-4


def test_bounded_integers_reject_out_of_range_bounds(rng):
    with pytest.raises(ParameterError):
        rng.stream("m", "p", 0).below(0, size=3)


def test_missing_key_raises_instead_of_falling_back_to_os_randomness():
    with pytest.raises(MissingKeyError):
        KeyedRandomness.from_env({})


def test_key_from_environment_and_file_agree(tmp_path):
    hexkey = "00112233445566778899aabbccddeeff" * 2
    path = tmp_path / "key"
    path.write_text(hexkey + "\n")
    path.chmod(0o600)
    a = KeyedRandomness.from_env({"DPSTREAM_SECRET_KEY": hexkey}).stream("m", "p", 0).uint64(4)
    b = KeyedRandomness.from_env({"DPSTREAM_SECRET_KEY_FILE": str(path)}).stream("m", "p", 0).uint64(4)
    assert np.array_equal(a, b)
    both = {"DPSTREAM_SECRET_KEY": hexkey, "DPSTREAM_SECRET_KEY_FILE": str(path)}
    assert np.array_equal(KeyedRandomness.from_env(both).stream("m", "p", 0).uint64(4), a)


def test_two_different_keys_in_the_environment_are_refused(tmp_path):
    """Before, the file's key silently won over DPSTREAM_SECRET_KEY: a user who exported a
    new key in a shell that also named an old key file ran (and later replayed) with the
    one they did not mean."""
    path = tmp_path / "key"
    path.write_text("00112233445566778899aabbccddeeff" * 2)
    path.chmod(0o600)
    other = "ffeeddccbbaa99887766554433221100" * 2
    with pytest.raises(MissingKeyError, match="hold different keys: set one of them") as err:
        KeyedRandomness.from_env({"DPSTREAM_SECRET_KEY": other, "DPSTREAM_SECRET_KEY_FILE": str(path)})
    assert other not in str(err.value) and "0011" not in str(err.value)


def test_short_keys_are_refused_and_keys_never_appear_in_repr():
    with pytest.raises(ParameterError) as err:
        KeyedRandomness(b"short")
    assert "short" not in str(err.value)
    key = b"super-secret-material-123-padded-to-32"
    assert "super-secret" not in repr(KeyedRandomness(key))


@pytest.mark.parametrize("value", ["correct horse battery staple, a long passphrase",
                                   "00112233445566778899aabbccddeeff",        # 16 bytes: too short
                                   "zz" * 32])
def test_passphrases_and_short_hex_keys_are_refused_from_the_environment(value):
    """Issue 8: the ledger's key fingerprint must not be a passphrase oracle."""
    with pytest.raises(MissingKeyError) as err:
        KeyedRandomness.from_env({"DPSTREAM_SECRET_KEY": value})
    assert value not in str(err.value)


def test_a_key_file_holding_two_keys_is_refused_not_read_as_a_third(tmp_path):
    """Before: ``bytes.fromhex`` skips whitespace, so a file a key had been appended to
    twice (``>>``) read as one 64-byte key, another key than either, silently."""
    import secrets
    one, two = secrets.token_hex(32), secrets.token_hex(32)
    path = tmp_path / "key"
    path.write_text(f"{one}\n")
    path.chmod(0o600)
    assert KeyedRandomness.from_file(str(path)).fingerprint() == KeyedRandomness(bytes.fromhex(one)).fingerprint()
    for text in (f"{one}\n{one}\n", f"{one} {two}"):
        path.write_text(text)
        with pytest.raises(MissingKeyError, match="two or more keys") as err:
            KeyedRandomness.from_file(str(path))
        assert one not in str(err.value) and two not in str(err.value)
    # one key wrapped as `xxd -p` writes it (60 digits a line) or spaced as `od` does: one key
    for text in (one[:60] + "\n" + one[60:] + "\n", " ".join(one[i:i + 2] for i in range(0, 64, 2))):
        path.write_text(text)
        assert KeyedRandomness.from_file(str(path)).fingerprint() == \
            KeyedRandomness(bytes.fromhex(one)).fingerprint()


def test_a_key_file_others_can_read_or_another_user_owns_is_refused(tmp_path):
    """Before: a key file of mode 0644, or one another user owned (and could swap for a key
    they know), was taken as it was."""
    import os
    path = tmp_path / "key"
    path.write_text("00112233445566778899aabbccddeeff" * 2)
    path.chmod(0o644)
    with pytest.raises(MissingKeyError, match="open to other users .mode 0644.: chmod 600 it"):
        KeyedRandomness.from_file(path)
    path.chmod(0o600)
    KeyedRandomness.from_file(path)
    if os.geteuid() == 0:                 # chown needs root
        os.chown(path, 65534, -1)
        with pytest.raises(MissingKeyError, match="belongs to uid 65534, not to you"):
            KeyedRandomness.from_file(path)


@pytest.mark.parametrize("value", ["00" * 32, "ab" * 32, "0123" * 16])
def test_a_key_that_is_not_random_is_refused(value):
    """Before: 64 zeros was a key (its noise is anyone's to recompute)."""
    with pytest.raises(MissingKeyError, match="not random"):
        KeyedRandomness.from_env({"DPSTREAM_SECRET_KEY": value})
