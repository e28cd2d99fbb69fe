"""A declared field's name is what a reader sees: printable characters of any script, spaces
inside it (schemas/features.py FieldName)."""
import asyncio

import pytest
from pydantic import ValidationError

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas.features import BooleanField, NumericField
from dpstream.streams.cli.commands import check_record
from dpstream.streams.tools.embedded import EmbeddedRuntime

RNG = KeyedRandomness(b"field-names-test-key-00000000000")


def registration(name: str) -> bytes:
    return ('{"model_id": "m", "budget": {"epsilon": 2, "delta": 1e-6}, "params": {"kind": '
            '"continual_winnow", "horizon": 1000}, "features": [{"type": "boolean", "name": "%s"}, '
            '{"type": "boolean", "name": "y2"}]}' % name).encode()


@pytest.mark.parametrize("escaped, shown", [
    (r"\u202eevil", "character 1 of 5 is U+202E (RIGHT-TO-LEFT OVERRIDE, category Cf)"),
    (r"a\u200bb", "character 2 of 3 is U+200B (ZERO WIDTH SPACE, category Cf)"),
    (r"a\u2028b", "character 2 of 3 is U+2028 (LINE SEPARATOR, category Zl)"),
    (r"a\u00a0b", "character 2 of 3 is U+00A0 (NO-BREAK SPACE, category Zs)"),
    (r"secret\ue000", "character 7 of 7 is U+E000 (category Co)"),
])
def test_a_field_name_with_an_invisible_character_is_refused_naming_only_that_character(escaped, shown):
    """Before: the pattern refused ASCII control characters only, so a registration whose
    field was named "\\u202eevil" (shown as "live" by a terminal) or "a\\u200bb" (looks
    like "ab") was accepted by the worker and published in its declaration."""
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all([("models", registration(escaped))]))
    [rejected] = rt.outputs["rejected"]
    assert rejected["reason"] == ("invalid registration: features.boolean.name: a field name holds "
                                  f"printable characters, with spaces only inside it: {shown}")
    assert check_record("models", registration(escaped)) == rejected["reason"].removeprefix(
        "invalid registration: ")
    assert "evil" not in rejected["reason"] and "secret" not in rejected["reason"]


@pytest.mark.parametrize("name", ["mean radius", "worst area (mm^2)", "naïve café", "Größe", "価格",
                                  "دخل", "x"])
def test_names_of_any_script_with_spaces_inside_stay_accepted(name):
    assert NumericField(name=name, lower=0, upper=1).name == name
    assert BooleanField(name=name).name == name


@pytest.mark.parametrize("name", [" x", "x ", "\tx", "x\n", ""])
def test_whitespace_at_either_end_and_the_empty_name_stay_refused(name):
    with pytest.raises(ValidationError):
        BooleanField(name=name)


@pytest.mark.parametrize("name, shown", [
    ("\u3164", "character 1 of 1 is U+3164 (HANGUL FILLER, category Lo)"),
    ("a\u3164b", "character 2 of 3 is U+3164 (HANGUL FILLER, category Lo)"),
    ("\u2800x", "character 1 of 2 is U+2800 (BRAILLE PATTERN BLANK, category So)"),
    ("a\uffa0", "character 2 of 2 is U+FFA0 (HALFWIDTH HANGUL FILLER, category Lo)"),
    ("a\u17b4b", "character 2 of 3 is U+17B4 (KHMER VOWEL INHERENT AQ, category Mn)"),
    ("a\u034fb", "character 2 of 3 is U+034F (COMBINING GRAPHEME JOINER, category Mn)"),
    ("x\ufe0f", "character 2 of 2 is U+FE0F (VARIATION SELECTOR-16, category Mn)"),
    ("\u0301x", "character 1 of 2 is U+0301 (COMBINING ACUTE ACCENT, category Mn)"),
    ("a\ud800b", "character 2 of 3 is U+D800 (category Cs)"),
])
def test_a_name_that_renders_blank_or_starts_with_a_mark_is_refused(name, shown):
    """Before (issue 43): these passed ``str.isprintable`` (the filler alone made a name
    that shows as nothing), and a lone surrogate got pydantic's "unable to parse raw
    data as a unicode string" instead of this message."""
    with pytest.raises(ValidationError) as err:
        BooleanField(name=name)
    assert f"with spaces only inside it: {shown}" in str(err.value)


@pytest.mark.parametrize("name", ["e\u0301t\u00e9", "\ud55c\uad6d\uc5b4 \uc774\ub984", "\u0915\u093f"])
def test_marks_after_a_letter_and_korean_text_stay_accepted(name):
    assert BooleanField(name=name).name == name


@pytest.mark.parametrize("first, second, says", [
    ("a\\ud800b", "c", "character 2 of 3 is U+FFFD (REPLACEMENT CHARACTER: a lone surrogate"),
    ("a\\ufffdb", "c", "character 2 of 3 is U+FFFD"),
    ("caf\\u00e9", "cafe\\u0301", "names that look the same")])
def test_names_a_reader_cannot_tell_apart_are_refused_for_new_registrations_only(first, second, says):
    """Before: "a\\ud800b" registered as "a\\ufffdb", and "café" (U+00E9) beside "cafe" +
    U+0301 as two fields that print the same. Now a new registration is refused; a config
    stored before the check still loads (the schema takes it), and its identical
    re-registration stays a no-op, so an upgraded worker keeps running it."""
    import json

    from dpstream.agents.sequencer import _checked
    from dpstream.schemas import ModelConfig
    text = ('{"model_id": "m", "budget": {"epsilon": 2, "delta": 1e-6}, "params": {"kind": '
            '"continual_winnow", "horizon": 1000}, "features": [{"type": "boolean", "name": "%s"}, '
            '{"type": "boolean", "name": "%s"}]}' % (first, second))
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all([("models", text.encode())]))
    [rejected] = rt.outputs["rejected"]
    assert rejected["reason"].startswith("infeasible model config: ") and says in rejected["reason"]
    # as the worker decoded and stored it before (a lone surrogate reads as U+FFFD): still loads
    config = ModelConfig.model_validate(json.loads(text.replace("\\ud800", "\\ufffd")))
    stored = {"config/m": config.model_dump(mode="json")}
    assert _checked(config, stored) == (config.model_dump(mode="json"), None)
    assert says in _checked(config, {})[1]
