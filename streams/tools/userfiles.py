"""The records in a user's files, read at the CLI's edge (``dpstream produce``, ``dpstream
run``, ``dpstream features``): JSONL, CSV, or Parquet (with the ``parquet`` extra), from a
path or from standard input (``-``); and the label convention.

Formats: ``--format``, else the file's extension (``.csv``, ``.parquet``/``.pq``), else
JSONL. A JSONL line is sent as it is unless its label is mapped (below). A CSV or
Parquet row becomes one record: the model id from ``--model-id`` (or a ``model_id``
column), the label from the label column (``y`` unless named), a query's id from
``query_id`` (or the named column), a person's ID (below), and every other column under
``"features"``. A CSV
cell is text, so it is typed by the model's declaration (schemas/features.py): a
numeric field's cell as a number, a boolean's ``true``/``false``/``1``/``0``/``yes``/``no``
as a boolean, a categorical's as the text itself (a zip code stays ``"01234"``); an
empty cell is left out (the field's missing slot). Columns the model does not declare
are not sent (the data owner's report names them). A model without a declaration takes
the feature columns, in order, as its dense ``x``. Without a declaration at hand
(``produce --no-check``, ``features --sample``), a column is typed as a whole
(``column_kinds``): numbers if every cell reads as one, booleans if every cell is
true/false/yes/no (or 0/1 beside them), else text.

A person's ID, for a model whose privacy unit is a person (``privacy_unit``): the column
``--privacy-id-column`` names, else the column named as the registration's ``id_field``
(``privacy_id`` by default). Its cell is sent as text where the registration reads the
ID: the top-level ``privacy_id``, or that key of ``"features"`` (never a declared feature:
the featuriser does not read it). An examples file without the column is refused (no
example would reach the learner); a query carries no ID, so the column is not sent with
queries. The sequencer replaces the ID by a keyed pseudonym before anything is logged.

Labels (docs/python-api.md, "Labels, answers, clones"): dpstream's records carry
-1/+1; a file may use -1/+1, 0/1 or true/false (one convention per file), read as -1/+1
with 0 and false as -1, and the command says so. A CSV or Parquet label cell of text
reads ``true``/``t``/``yes`` as true and ``false``/``f``/``no`` as false, in any case
(``label_cell``; the words a boolean feature's cell takes too); in JSONL the label is a
JSON value, so ``true``/``false`` only. Anything else (a 2, a "yes", a file
that mixes 0 and -1, whose meaning is ambiguous) is refused before anything is sent or
run, naming the line.
"""
from __future__ import annotations

import csv
import datetime
import decimal
import io
import json
import math
import numbers
import re
import sys
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("jsonl", "csv", "parquet")
LABEL_COLUMN = "y"


class FileError(Exception):
    """A file that cannot be read as asked (the message names the file and the place)."""


@dataclass
class Row:
    """One record of a file: where it is (for messages), its bytes as sent, and its
    parsed value (None with ``error`` when the line is not JSON)."""
    where: str
    raw: bytes
    value: object = None
    error: str | None = None


def file_format(path: str, given: str | None = None) -> str:
    """``given`` (--format), else by extension; JSONL otherwise."""
    if given:
        return given
    suffix = Path(path).suffix.lower()
    return {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}.get(suffix, "jsonl")


MAX_FILE_BYTES = 1 << 30      # an input file is read into memory: 1 GiB, then split it


def read_bytes(path: str) -> bytes:
    """A whole input file (``-``: standard input), at most MAX_FILE_BYTES: the commands hold
    every record in memory, and before, /dev/zero or an endless pipe grew the process until
    a MemoryError traceback (on a shared host, after taking every other process's memory)."""
    shown = "standard input" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise FileError(f"cannot read {path}: {err.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise FileError(f"{shown} holds more than {MAX_FILE_BYTES:,} bytes: split it into smaller "
                        "files (each is read into memory)")
    return data


def text_of(path: str, data: bytes) -> str:
    """A file's text: UTF-8 (a BOM dropped), or UTF-16 with its BOM (what Excel's "Unicode
    text" and PowerShell write); FileError naming the line otherwise. Before, a Latin-1
    file was read with U+FFFD for every accent without a word (its categories then
    matched no vocabulary entry), and a UTF-16 one was refused for its cell counts."""
    shown = "standard input" if path == "-" else path
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise FileError(f"{shown}: starts like UTF-16 but is not: save it as UTF-8") from None
    if b"\x00" in data:             # UTF-16 or UTF-32 without a BOM: ASCII with NULs between
        line = data[:data.index(b"\x00")].count(b"\n") + 1
        raise FileError(f"{shown} line {line}: holds NUL bytes, so it is not UTF-8 text (UTF-16 or "
                        "UTF-32 without a byte-order mark, perhaps): save the file as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise FileError(f"{shown} line {line}: not UTF-8 (Latin-1 or Windows-1252, perhaps): save "
                        "the file as UTF-8 (in Excel: CSV UTF-8)") from None


def read_jsonl(path: str) -> list[Row]:
    """The non-empty lines of a JSONL file, each parsed with the worker's bounded decoder
    (schemas/limits.py ``decode``, without its byte limit: ``produce`` checks that per
    record), or with its error: "not JSON (...)", or the structural limit the line breaks.
    Before, a line nested 100,000 deep ended ``features --sample`` and ``produce`` in a
    RecursionError traceback."""
    from dpstream.schemas.limits import MALFORMED, LimitError, decode
    rows = []
    data = read_bytes(path)
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):       # UTF-16 lines, as UTF-8 (``text_of``)
        data = text_of(path, data).encode("utf-8", "surrogatepass")
    for n, line in enumerate(data.splitlines(), 1):
        line = line.rstrip(b"\r")
        if not line.strip():
            continue
        try:
            rows.append(Row(f"line {n}", line, decode(line, max_bytes=None)))
        except LimitError as err:
            rows.append(Row(f"line {n}", line, None,
                            f"not JSON {err.detail}".strip() if str(err) == MALFORMED else str(err)))
    return rows


def read_table(path: str, fmt: str) -> list[dict]:
    """The rows of a CSV file (cells as text) or a Parquet file (cells as Python values;
    needs pyarrow: ``pip install 'dpstream[parquet]'``), as dicts by column name."""
    if fmt == "csv":
        text = text_of(path, read_bytes(path))
        reader = csv.reader(io.StringIO(text), strict=True)   # an unterminated quote is an error,
        # not a cell that swallows the rest of the file
        rows = []
        start = 1                       # the line the row being read starts on
        try:
            header = next(reader, [])
            _distinct_columns(path, header)
            start = reader.line_num + 1
            for cells in reader:
                start, row_start = reader.line_num + 1, start
                if not cells:           # a blank line, as csv.DictReader skips it
                    continue
                if len(cells) != len(header):
                    raise FileError(f"{path} line {row_start} has {len(cells)} cells and the "
                                    f"header {len(header)}: quote a cell that holds a comma, and give "
                                    "every column a cell (an empty one is a missing value)")
                rows.append(dict(zip(header, cells)))
        except csv.Error as err:        # e.g. a quote left open: said where its row starts
            raise FileError(f"{path} line {start}: not CSV ({err})") from None
        return rows
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise FileError(f"{path}: reading Parquet needs pyarrow (pip install 'dpstream[parquet]')") from None
    source = io.BytesIO(read_bytes(path)) if path == "-" else path
    try:
        table = pq.read_table(source)
    except Exception as err:           # noqa: BLE001 - pyarrow's errors: one line, never a traceback
        raise FileError(f"cannot read {path} as Parquet: {str(err)[:200]}") from None
    _distinct_columns(path, table.column_names)
    return [{c: _json_cell(path, c, v) for c, v in row.items()} for row in table.to_pylist()]


def _json_cell(path: str, column: str, value):
    """A Parquet cell as a JSON value: decimals and durations as numbers (seconds), dates and
    times as ISO 8601 text (a categorical value, or text a numeric field counts as missing);
    FileError for a type JSON has no counterpart for (binary). Before, a date, decimal or
    binary cell stopped ``run`` and ``produce`` with a traceback (json.dumps)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, numbers.Integral):                    # numpy's ints
        return int(value)
    if isinstance(value, (decimal.Decimal, numbers.Real)):     # numpy's float16, a decimal
        return float(value)
    if isinstance(value, (datetime.date, datetime.time)):      # datetime is a date
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (list, tuple)):                      # a map column's (key, value) pairs
        return [_json_cell(path, column, v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_cell(path, column, v) for k, v in value.items()}
    raise FileError(f"{path}: column {column[:64]!r} holds {type(value).__name__} values, which JSON has "
                    "no type for: convert the column to numbers or text")


def _distinct_columns(path: str, names: list[str]) -> None:
    """FileError when two columns share a name: a record holds one value per name, and
    which one a dict of the row keeps (the last) is no choice to make silently."""
    first: dict[str, int] = {}
    for i, name in enumerate(names, 1):
        if name in first:
            raise FileError(f"{path}: columns {first[name]} and {i} are both named {name[:64]!r}: "
                            "rename one (a record holds one value per name)")
        first[name] = i


_TRUTH = {"true": True, "t": True, "yes": True, "false": False, "f": False, "no": False}


def _number(text: str):
    try:
        return int(text)
    except ValueError:
        number = float(text)            # ValueError: not a number
        if not math.isfinite(number):
            raise ValueError(text) from None
        return number


def cell(value, kind: str | None = None):
    """A table cell as a JSON value, typed by ``kind`` ("numeric", "boolean",
    "categorical": a declared field's type, or ``column_kinds``' guess); a cell that
    does not read as its kind stays text (the report counts it); None for an empty
    cell. Non-text cells (Parquet's) pass as they are."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text == "":
        return None
    if kind == "boolean":
        truth = {**_TRUTH, "1": True, "0": False}.get(text.lower())
        return value if truth is None else truth
    if kind == "numeric":
        try:
            return float(_number(text))
        except (ValueError, OverflowError):    # an integer beyond float64 (a 400-digit cell):
            return value                       # text, as "inf" is (the numeric field's missing slot)
    if kind == "categorical":
        return value
    return _TRUTH.get(text.lower(), value)


LABEL_NUMBER = re.compile(r"(\+?[01]|-1)(\.0*)?")     # 1, +1, 0, -1, 1.0, -1.00, ...


def label_cell(value):
    """A label cell: -1, 0, 1 as written (``LABEL_NUMBER``: an optional plus sign, zeros
    after a decimal point) as an integer, true/false/yes/no as a boolean (``map_labels``
    then reads the file's convention); None when empty. Any other number, however close
    (``1e-400`` reads as 0.0, ``1.0000000000000001`` as 1.0, ``01``), is NaN: refused as
    another number, not read as a class it only rounds to."""
    if not isinstance(value, str) or not value.strip():
        return value if isinstance(value, (bool, int, float)) else None
    text = value.strip()
    if LABEL_NUMBER.fullmatch(text):
        return int(float(text))
    try:
        _number(text)
    except ValueError:
        return _TRUTH.get(text.lower(), value)
    return math.nan


def column_kinds(table: list[dict]) -> dict[str, str]:
    """A guess at each text column's kind, from all its cells (no declaration at hand):
    "numeric" when every cell reads as a number (``inf``, ``NaN`` and the like too, as
    pandas writes them: such a cell stays text, which a numeric field sends to its missing
    slot), "boolean" when every cell is true/false/yes/no (or 0/1 beside them), else
    "categorical"."""
    kinds = {}
    for column in (table[0] if table else {}):
        cells = {v.strip().lower() for r in table if isinstance(v := r.get(column), str) and v.strip()}
        try:
            numeric = bool(cells) and all(float(c) is not None for c in cells)
        except ValueError:
            numeric = False
        if cells and not numeric and cells <= set(_TRUTH) | {"0", "1"}:
            kinds[column] = "boolean"
        else:
            kinds[column] = "numeric" if numeric else "categorical"
    return kinds


@dataclass
class TableSpec:
    """How table rows become records (the CLI's --model-id, --label-column, --id-column)."""
    topic: str                              # examples or queries
    model_id: str | None = None
    label_column: str = LABEL_COLUMN
    id_column: str = "query_id"
    model_from: str = "--model-id"          # where model_id comes from, for messages
    privacy_id_column: str | None = None    # a person's ID (default: the registration's id_field)


def _person_column(path: str, spec: TableSpec, columns: list[str], configs: dict) -> dict[str, tuple]:
    """For each model of the file whose privacy unit is a person: (the ID column, where the
    ID goes: "privacy_id" for the top-level field, else the raw feature of that name).
    FileError when an examples file has no such column (no example would reach the
    learner), or when the named column is a feature the model declares."""
    out = {}
    for model_id, config in configs.items():
        unit = getattr(config, "privacy_unit", None)
        if unit is None:
            continue
        column = spec.privacy_id_column or unit.id_field
        if spec.topic == "examples" and column not in columns:
            how = (f"--privacy-id-column {column[:64]!r} names no column" if spec.privacy_id_column
                   else f"it has no column {column[:64]!r} (model {model_id}'s privacy_unit.id_field)")
            raise FileError(f"{path}: {how}, so no example would reach model {model_id}, whose privacy "
                            "unit is a person: name the ID column with --privacy-id-column")
        if config.features is not None and any(f.name == column for f in config.features):
            raise FileError(f"{path}: --privacy-id-column {column[:64]!r} is a feature model {model_id} "
                            "declares: a person's ID is not a feature; name the column that holds the ID")
        out[model_id] = (column, unit.id_field)
    return out


def _id_not_a_feature(path: str, spec: TableSpec, table: list[dict], configs: dict) -> None:
    """FileError when the query id column is a feature some model of the file declares: a
    query id is published as it is on ``answers`` and ``predictions``, so ``--id-column
    age`` would publish every query's age (and take the column away from the features)."""
    ids = {spec.model_id} if spec.model_id is not None else {r.get("model_id") for r in table}
    for model_id in sorted(i for i in ids if isinstance(i, str)):
        config = configs.get(model_id)
        if config is not None and config.features is not None and \
                any(f.name == spec.id_column for f in config.features):
            raise FileError(f"{path}: --id-column {spec.id_column[:64]!r} is a feature model {model_id} "
                            "declares: a query id is published on answers as it is; name a column "
                            "that only identifies the query")


def table_rows(path: str, fmt: str, spec: TableSpec, configs: dict) -> tuple[list[Row], list[str]]:
    """The records of a CSV or Parquet file (module docstring), and the columns left out;
    ``configs``: the models' registrations in force by id (their declarations type the
    cells), possibly empty."""
    table = read_table(path, fmt)
    if not table:
        return [], []
    columns = list(table[0])
    if spec.model_id is None and "model_id" not in columns:
        raise FileError(f"{path}: name the model with --model-id (or give a model_id column)")
    label = spec.label_column if spec.topic == "examples" else None
    if label is not None and label not in columns:
        raise FileError(f"{path} has no label column {label!r} (columns: {', '.join(columns)[:300]}): "
                        "name it with --label-column")
    if spec.topic == "queries" and spec.id_column != TableSpec.id_column and spec.id_column not in columns:
        raise FileError(f"{path} has no id column {spec.id_column[:64]!r} (columns: "
                        f"{', '.join(columns)[:300]}): name it with --id-column")
    if spec.topic == "queries" and spec.id_column in columns:
        _id_not_a_feature(path, spec, table, configs)
    ids = {spec.model_id} if spec.model_id is not None else {r.get("model_id") for r in table}
    persons = _person_column(path, spec, columns, {m: configs[m] for m in ids
                                                   if isinstance(m, str) and m in configs})
    # a person's ID column is never a feature; without a registration at hand, the column
    # named privacy_id (or --privacy-id-column) is the top-level field
    person_columns = {c for c, _ in persons.values()} | {spec.privacy_id_column or "privacy_id"}
    skip = {"model_id", spec.label_column, spec.id_column} | person_columns
    guessed = column_kinds(table)
    rows, left_out = [], {}
    for n, row in enumerate(table, 2 if fmt == "csv" else 1):
        if spec.model_id is not None and row.get("model_id") not in (None, "", spec.model_id):
            raise FileError(f"{path} row {n}: its model_id column names another model than "
                            f"{spec.model_id[:64]!r} ({spec.model_from}): drop the column, or name "
                            "the model with --model-id")
        model_id = spec.model_id or row.get("model_id")
        config = configs.get(model_id) if isinstance(model_id, str) else None
        record: dict = {"model_id": model_id}
        if config is not None and config.features is None:
            try:
                record["x"] = [float(cell(row[c], "numeric")) for c in columns if c not in skip]
            except (TypeError, ValueError):
                raise FileError(f"{path} row {n}: model {model_id} takes dense x, and a feature "
                                "cell is not a number") from None
            if len(record["x"]) != config.dimension:         # before: sent, then dead-lettered
                features = [c for c in columns if c not in skip]
                raise FileError(f"{path}: model {model_id} takes dense x of {config.dimension:,} entries, "
                                f"and the file has {len(features):,} feature columns "
                                f"({', '.join(c[:40] for c in features)[:300]}): drop the others, or "
                                "declare the model's features")
            if not all(map(math.isfinite, record["x"])):     # before: sent, then dead-lettered
                raise FileError(f"{path} row {n}: model {model_id} takes dense x, and a feature "
                                "cell is not a finite number (NaN, infinite, or beyond float64)")
        else:
            declared = {f.name: f.type for f in config.features} if config is not None else None
            features = {}
            for c in columns:
                if c in skip:
                    continue
                if declared is not None and c not in declared:
                    left_out[c] = None
                    continue
                value = cell(row[c], declared[c] if declared is not None else guessed[c])
                if value is not None:
                    features[c] = value
            record["features"] = features
        if label is not None:
            record["y"] = label_cell(row[label])
            # a bounded model's ID where it reads it; with no registration at hand, the
            # top-level field (a model without a privacy unit gets none: it needs none)
            column, into = persons[model_id] if model_id in persons else \
                (spec.privacy_id_column or "privacy_id", "privacy_id") if config is None else (None, None)
            person = _id_cell(row.get(column)) if column is not None else None
            if person is not None and into == "privacy_id":
                record["privacy_id"] = person
            elif person is not None and isinstance(record.get("features"), dict):
                record["features"][into] = person
        elif spec.topic == "queries" and row.get(spec.id_column) not in (None, ""):
            record["query_id"] = str(row[spec.id_column])
        rows.append(Row(f"row {n}", json.dumps(record).encode(), record))
    return rows, list(left_out)


def _id_cell(value):
    """A person's ID cell as sent: text (stripped; a Parquet integer stays one), None when
    empty (the example then has no ID)."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, (int, str)) else None


def read_rows(path: str, fmt: str, spec: TableSpec, configs: dict) -> tuple[list[Row], list[str]]:
    """The records of a file in any of ``FORMATS``, and the table columns left out (a
    declared model's undeclared columns)."""
    if fmt not in FORMATS:
        raise FileError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    return (read_jsonl(path), []) if fmt == "jsonl" else table_rows(path, fmt, spec, configs)


# ------------------------------------------------------------------ labels
class LabelError(ValueError):
    """Labels that follow none of the accepted conventions (the message names the line)."""


def _label_kind(y) -> str | None:
    """"bool", "-1", "0", "1", or None for anything else."""
    if isinstance(y, bool):
        return "bool"
    if isinstance(y, (int, float)) and not isinstance(y, bool) and y in (-1, 0, 1):
        return str(int(y))
    return None


def _what(y) -> str:
    """What a refused label is, by its JSON type only: a label is a private value, and an
    error message carries no input value (a diagnosis, an account number), not even a
    prefix of one."""
    if isinstance(y, str):
        return "a string"
    if isinstance(y, (int, float)):
        return "another number"
    return {type(None): "null", list: "a list", dict: "an object"}.get(type(y), "another value")


def map_labels(rows: list[Row], name: str) -> str | None:
    """Rewrite the labels of ``rows`` to -1/+1 in place (module docstring) and say how
    they were read (None when they were -1/+1 already). LabelError when a label is not
    one of the conventions, or the file mixes them. Rows without a ``y`` are left to
    the schema check."""
    first: dict[str, str] = {}
    for row in rows:
        if not isinstance(row.value, dict) or "y" not in row.value:
            continue
        kind = _label_kind(row.value["y"])
        if kind is None:
            raise LabelError(f"{name} {row.where}: the label is {_what(row.value['y'])}, not one of "
                             "-1/+1, 0/1 or true/false")
        first.setdefault(kind, row.where)
    if "bool" in first and len(first) > 1:
        other = next(k for k in first if k != "bool")
        raise LabelError(f"{name} mixes true/false labels ({first['bool']}) with numbers "
                         f"({first[other]}): use one convention")
    if "0" in first and "-1" in first:     # no line named: the lines with 0 and -1 are both negatives
        raise LabelError(f"{name} mixes labels 0 and -1: is 0 the negative class? use -1/+1 or 0/1, "
                         "not both")
    if "bool" in first:
        note = f"{name}: labels true/false read as +1/-1"
    elif "0" in first:
        note = f"{name}: labels 0/1 read as -1/+1 (0 -> -1)"
    elif any(isinstance(r.value, dict) and isinstance(r.value.get("y"), float) for r in rows):
        note = f"{name}: labels -1.0/1.0 read as -1/+1"
    else:
        return None
    for row in rows:
        if isinstance(row.value, dict) and "y" in row.value:
            y = row.value["y"]
            row.value["y"] = 1 if (y is True or (not isinstance(y, bool) and y == 1)) else -1
            row.raw = json.dumps(row.value).encode()
    return note
