"""The featuriser of declared features (learners/features.py) and the suggestion tool:
every JSON object gives a row within the declared bounds, and a suggestion is a valid
declaration made from the sample alone."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.learners.features import Featuriser, bucket, suggest_fields
from dpstream.schemas.features import BooleanField, CategoricalField, NumericField, declared_dimension
from dpstream.streams.cli.commands import main

FIELDS = [NumericField(name="amount", lower=0, upper=100, bins=4),
          NumericField(name="age", lower=18, upper=90, bins=4, edges=[30, 45, 60]),
          CategoricalField(name="country", vocabulary=["fr", "de", "us"]),
          CategoricalField(name="merchant", hash_buckets=16),
          BooleanField(name="online")]
F = Featuriser(FIELDS)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
                           | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                           max_leaves=6)
records = st.dictionaries(st.sampled_from(["amount", "age", "country", "merchant", "online", "other"]),
                          json_values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(records)
def test_every_record_gives_one_active_slot_per_field_within_its_range(record):
    active = F.active(record)
    assert len(active) == F.active_count == len(FIELDS)
    for index, offset, field in zip(active, F.binary_offsets, F.fields):
        assert offset <= index < offset + field.binary_size
    assert F.binary_dimension == declared_dimension(FIELDS, binary=True)


@settings(max_examples=300, deadline=None)
@given(records)
def test_every_record_gives_a_dense_row_in_the_unit_box_with_one_entry_per_field(record):
    x = np.array(F.dense(record))
    assert x.shape == (F.real_dimension,) == (declared_dimension(FIELDS, binary=False),)
    assert np.all(np.abs(x) <= 1.0)
    for offset, field in zip(F.real_offsets, F.fields):
        assert np.count_nonzero(x[offset:offset + field.real_size]) <= 1
    assert np.linalg.norm(x) <= np.sqrt(len(FIELDS)) + 1e-12


def test_slots_follow_the_declaration():
    amount, age, country, merchant, online = F.fields
    assert [amount.slot(v) for v in (-5, 0, 24.9, 25, 99, 100, 1e300, "12", None, True)] == \
        [0, 0, 0, 1, 3, 3, 3, 4, 4, 4]            # clamped; a string, missing or a bool: missing
    assert [age.slot(v) for v in (18, 29.9, 30, 45, 59, 60, 90)] == [0, 0, 1, 2, 2, 3, 3]
    assert [country.slot(v) for v in ("fr", "de", "us", "jp", None, 3)] == [0, 1, 2, 3, 3, 3]
    assert merchant.slot(None) == 16 and merchant.slot("m1") == bucket("m1", 16) < 16
    assert [online.slot(v) for v in (False, True, None, 1)] == [0, 1, 2, 2]


def test_the_hash_is_public_and_stable():
    """BLAKE2b of the UTF-8 value: the same in every process, version and machine."""
    assert bucket("merchant-0042", 1 << 20) == 550070 and bucket("", 7) == 0   # pinned: a change re-buckets every model


def test_a_suggestion_uses_the_sample_alone_and_is_a_valid_declaration():
    rng = np.random.default_rng(0)                # data of the test, not of a mechanism
    sample = [{"amount": float(a), "country": str(c), "online": bool(o), "merchant": f"m{m}",
               "mixed": 1 if i % 2 else "one", "constant": 5, "missing": None}
              for i, (a, c, o, m) in enumerate(zip(rng.gamma(2, 30, 400), rng.choice(["fr", "de"], 400),
                                                   rng.integers(0, 2, 400), rng.integers(0, 500, 400)))]
    fields = {f.name: f for f in suggest_fields(sample, max_vocabulary=100)}
    assert set(fields) == {"amount", "country", "online", "merchant"}      # mixed, constant, missing left out
    xs = np.array([r["amount"] for r in sample])
    assert fields["amount"].lower == pytest.approx(xs.mean() - 2 * xs.std())
    assert fields["amount"].upper == pytest.approx(xs.mean() + 2 * xs.std()) and fields["amount"].bins == 8
    assert fields["country"].vocabulary == ["de", "fr"] and fields["merchant"].hash_buckets == 64
    quantile = {f.name: f for f in suggest_fields(sample, binning="quantile", bins=4)}["amount"]
    assert quantile.edges and all(quantile.lower < e < quantile.upper for e in quantile.edges)
    assert quantile.bins == len(quantile.edges) + 1
    with pytest.raises(ValueError):
        suggest_fields(sample, binning="kmeans")


def test_dpstream_features_prints_a_declaration_a_registration_accepts(tmp_path, capsys):
    import dpstream.agents  # noqa: F401 - registers the kinds
    from dpstream.schemas import ModelConfig
    sample = tmp_path / "public.jsonl"
    sample.write_text("".join(json.dumps({"features": {"amount": a, "country": c}}) + "\n"
                              for a, c in [(1.0, "fr"), (5.5, "de"), (9.0, "fr"), (3.0, "us")]))
    assert main(["features", "--sample", str(sample), "--bins", "4"]) == 0
    out = capsys.readouterr().out
    declared = json.loads(out[out.index("["):out.rindex("]") + 1])
    config = ModelConfig.model_validate({"model_id": "m", "budget": {"epsilon": 1.0, "delta": 1e-6},
                                         "params": {"kind": "continual_winnow"}, "features": declared})
    assert config.dimension == declared_dimension(config.features, binary=True) == 4 + 1 + 3 + 1


finite = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(finite, finite, st.integers(2, 6), st.booleans(),
       st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.sampled_from(
           [1.7976931348623157e308, -1.7976931348623157e308, 8.98e307, 5e-324, 10**400]))
def test_any_bounds_a_registration_accepts_featurise_every_value_into_the_row(a, b, bins, edges, value):
    """Issue 42 item 3: bounds are either refused at registration, naming the field (their
    span overflows float64: before, -1e308..1e308 was accepted and then most values gave
    NaN rows), or every value featurises into [-1, 1] and into a bin or the missing slot."""
    lower, upper = min(a, b), max(a, b)
    inner = sorted({lower + (upper - lower) * q for q in (0.25, 0.5, 0.75)}) if edges else None
    try:
        field = NumericField(name="v", lower=lower, upper=upper, bins=len(inner) + 1 if edges else bins,
                             edges=inner)
    except ValueError as err:                         # refused at registration, saying why
        if lower < upper and not np.isfinite(upper - lower):
            assert "numeric field 'v': upper - lower must be at most" in str(err)
        else:                                         # empty, or inner edges rounding onto a bound
            assert lower == upper or "edges" in str(err)
        return
    f = Featuriser([field])
    (x,) = f.dense({"v": value})
    assert np.isfinite(x) and -1.0 <= x <= 1.0
    (slot,) = f.active({"v": value})
    assert 0 <= slot <= field.bins


def test_a_lone_surrogate_reads_as_the_replacement_character_in_the_library_too():
    """The worker's decoder reads "\\ud83d" as U+FFFD; the library featuriser, given the raw
    Python string, hashes and looks up the same text (before, the hash raised
    UnicodeEncodeError)."""
    f = Featuriser([CategoricalField(name="c", vocabulary=["\ufffd"]),
                    CategoricalField(name="h", hash_buckets=1000)])
    assert f.active({"c": "\ud83d", "h": "\ud83d"}) == f.active({"c": "\ufffd", "h": "\ufffd"}) == \
        [0, 2 + bucket("\ufffd", 1000)]
    assert f.active({"h": "\ud83d\ude00"}) == f.active({"h": "\U0001f600"})     # a pair: its character
