"""``dpstream features --sample`` on the files data frames write: one line per problem,
never a traceback, never a declaration without finite bounds."""
import json

import pytest

from dpstream.schemas.features import NumericField
from dpstream.streams.cli.commands import main


def features(capsys, path) -> tuple[int, dict, list[str]]:
    code = main(["features", "--sample", str(path)])
    out, err = capsys.readouterr()
    return code, ({f["name"]: f for f in json.loads(out)} if out else {}), err.splitlines()


def test_numbers_near_float64s_largest_give_finite_bounds_not_a_traceback(tmp_path, capsys):
    """Before: numpy's std overflowed (1e200 squared), the bounds were -inf/+inf and
    NumericField's check ended `features` in a pydantic traceback."""
    path = tmp_path / "huge.csv"
    path.write_text("a,b\n" + "".join(f"{v},{i}\n" for i, v in enumerate(["0.0", "1e+200", "2e+200"] * 10)))
    code, fields, err = features(capsys, path)
    assert code == 0 and set(fields) == {"a", "b"}
    a = NumericField(**fields["a"])
    assert 0 > a.lower > -1e200 and 2e200 < a.upper < 3e200


def test_a_span_no_float64_holds_leaves_the_field_out_with_a_word(tmp_path, capsys):
    path = tmp_path / "span.jsonl"
    path.write_text("".join(json.dumps({"a": v, "b": i}) + "\n" for i, v in enumerate([1.7e308, -1.7e308, 0.0])))
    code, fields, err = features(capsys, path)
    assert code == 0 and set(fields) == {"b"}
    assert ("dpstream features: 'a': left out: values from -1.7e+308 to 1.7e+308 span more than a "
            "float64 holds: scale the field in the data") in err


def test_inf_and_nan_written_as_text_are_missing_values_of_a_numeric_field(tmp_path, capsys):
    """Before: one "inf" cell (as pandas writes an infinity) made the whole CSV column text,
    declared as a vocabulary of every number in the sample; in JSONL, "NaN" beside numbers
    left the field out as "mixed types"."""
    rows = [str(0.5 * i) for i in range(20)] + ["inf", "NaN", "-Infinity"]
    (tmp_path / "s.csv").write_text("a,b\n" + "".join(f"{v},{i % 3}\n" for i, v in enumerate(rows)))
    (tmp_path / "s.jsonl").write_text("".join(json.dumps({"a": v if v in ("inf", "NaN", "-Infinity")
                                                          else float(v), "b": i % 3}) + "\n"
                                              for i, v in enumerate(rows)))
    for name in ("s.csv", "s.jsonl"):
        code, fields, err = features(capsys, tmp_path / name)
        assert code == 0 and fields["a"]["type"] == "numeric"
        assert (f"dpstream features: 'a': 3 value(s) '-Infinity', 'NaN', 'inf' read as missing (not a "
                "finite number: a numeric field sends them to its missing slot)") in err
        assert NumericField(**fields["a"]).upper < 20


def test_a_column_without_a_header_is_left_out_as_a_data_frames_index(tmp_path, capsys):
    """Before: pandas' index column ("" when written by to_csv(), "Unnamed: 0" once read
    and written again) was declared as a numeric feature: every row's number in the file."""
    path = tmp_path / "pandas.csv"
    path.write_text(",Unnamed: 0,mean radius,y\n" + "".join(f"{i},{i},{10 + i % 7},1\n" for i in range(30)))
    code, fields, err = features(capsys, path)
    assert code == 0 and set(fields) == {"mean radius"}
    assert ("dpstream features: '': left out: a column without a header (a DataFrame's index? write "
            "the file with to_csv(index=False))") in err
    assert ("dpstream features: 'Unnamed: 0': left out: pandas' name for a column without a header (a "
            "DataFrame's index? write the file with to_csv(index=False))") in err


@pytest.mark.parametrize("text, line", [
    ("a,b,a\n1,2,3\n", "columns 1 and 3 are both named 'a': rename one (a record holds one value per name)"),
    ("a,b\n1,2\n3,4,5\n", "line 3 has 3 cells and the header 2: quote a cell that holds a comma, and give "
                          "every column a cell (an empty one is a missing value)"),
    ("a,b\n1,2\n\n3\n", "line 4 has 1 cells and the header 2: quote a cell that holds a comma, and give "
                        "every column a cell (an empty one is a missing value)"),
])
def test_duplicate_column_names_and_ragged_rows_are_refused_in_one_line(tmp_path, capsys, text, line):
    """Before: csv.DictReader kept the last of two columns named alike, put the cells
    beyond the header under the key None (`features` ended in a KeyError traceback), and
    filled a short row's last cells with None (missing values, without a word)."""
    path = tmp_path / "bad.csv"
    path.write_text(text)
    code, fields, err = features(capsys, path)
    sep = " " if "line" in line else ": "
    assert (code, fields, err) == (2, {}, [f"dpstream features: {path}{sep}{line}"])


@pytest.mark.parametrize("name, text", [
    ("big.csv", "a,b\n" + "9" * 400 + ",1\n1.5,2\n2.5,3\n"),
    ("big.jsonl", "".join(json.dumps({"a": v, "b": i}) + "\n" for i, v in enumerate([10 ** 400, 1.5, 2.5]))),
])
def test_an_integer_beyond_float64_is_a_missing_value_as_inf_is(tmp_path, capsys, name, text):
    """Before: a 400-digit integer (a CSV cell, or a JSON number) ended ``features --sample``
    (and ``produce`` over a declared numeric field) in "OverflowError: int too large to
    convert to float"; the worker sends it to the field's missing slot (docs/limits.md)."""
    path = tmp_path / name
    path.write_text(text)
    code, fields, err = features(capsys, path)
    assert code == 0 and set(fields) == {"a", "b"}
    a = NumericField(**fields["a"])
    assert -10 < a.lower < a.upper < 10        # bounds from 1.5 and 2.5 alone
    note = next(line for line in err if line.startswith("dpstream features: 'a': 1 value(s) "))
    assert note.endswith("read as missing (not a finite number: a numeric field sends them to its missing slot)")
    assert "9" * 13 not in note


def test_a_numeric_cell_beyond_float64_is_typed_as_text_for_the_missing_slot():
    from dpstream.streams.tools.userfiles import cell
    assert cell("9" * 400, "numeric") == "9" * 400 and cell("2", "numeric") == 2.0


@pytest.mark.parametrize("values, says", [
    (["secret-" + "s" * 200, "short", "other"],
     "1 value(s) longer than 128 characters (a vocabulary entry's most) left out of the vocabulary: "
     "they go to its 'other' slot"),
    (["A" * 200, "B" * 200, "C" * 300],
     "3 value(s) longer than 128 characters (a vocabulary entry's most) hashed into 64 buckets"),
])
def test_a_category_longer_than_a_vocabulary_entry_is_left_out_without_echoing_it(tmp_path, capsys, values, says):
    """Before: a sample value longer than 128 characters ended ``features --sample`` in a
    pydantic string_too_long traceback that echoed the value."""
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps({"c": v, "n": i}) + "\n" for i, v in enumerate(values)))
    code, fields, err = features(capsys, path)
    assert code == 0 and set(fields) == {"c", "n"}
    assert fields["c"].get("vocabulary") in (["other", "short"], None)
    assert f"dpstream features: 'c': {says}" in err
    assert not any(v[:20] in "\n".join(err) for v in values if len(v) > 128)


def test_a_sample_line_nested_100000_deep_is_one_line_naming_it_and_the_limit(tmp_path, capsys):
    """Before: RecursionError traceback in userfiles.read_jsonl (``features --sample`` and
    ``produce`` alike); the worker's decoder (schemas/limits.py) now reads every line."""
    path = tmp_path / "deep.jsonl"
    path.write_text('{"a": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    code, fields, err = features(capsys, path)
    assert code == 1 and fields == {}
    assert err == [f"dpstream features: {path} line 2: nested too deeply: arrays and objects nest at "
                   "most 128 levels (a structural limit, docs/limits.md)"]
