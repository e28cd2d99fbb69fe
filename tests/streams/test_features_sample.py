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
