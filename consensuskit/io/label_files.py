"""Base labels read from CSV files, with errors that point at the file's line and column.

Numbering convention: every message counts **file lines** and **columns from 1**,
as a text editor shows them ("line 3" is the third line of the file, header
included; "column 2" is the second field of a line).  Data rows are never
numbered on their own, so a parse error and a validation error about the same
row name the same line.

What a file may hold (one line per point, one column per base clustering):

* labels that are integers (``0``, ``7``, ``2.0``) or names (``setosa``, ``A``);
  a column with any name is recoded as a whole (its distinct values, sorted,
  become ``0..k-1``).  A column of decimal numbers (``1.5``) is refused: it looks
  like a feature, not a clustering;
* a missing label as an empty field, ``-1``, ``NA``, ``N/A``, ``NaN``, ``nan``,
  ``None`` or ``null``;
* an optional header line and an optional index column (row identifiers).

Nothing is guessed silently: a ragged line, a blank line between data lines, a
header that cannot be told from data, and an ID-like column (a different value
on every line) are errors that say what to pass instead.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass

import numpy as np

__all__ = ["LabelFileError", "LabelTable", "read_label_table", "read_feature_table",
           "MISSING_TOKENS", "MIN_ROWS_ID_CHECK"]

#: Field values that mean "no label".
MISSING_TOKENS = frozenset({"", "-1", "NA", "N/A", "NaN", "nan", "None", "null"})

#: A column with a different value on every line is called ID-like from this many lines on
#: (below it, all-distinct labels are too common to mean anything).
MIN_ROWS_ID_CHECK = 5


class LabelFileError(ValueError):
    """Bad content in a label or feature file; the message names the line and column."""


@dataclass
class LabelTable:
    """A label file, parsed.

    Attributes
    ----------
    codes : int64 (n_rows, n_columns)
        Label codes ``0..k_j-1`` per column, ``-1`` missing.
    categories : list of n_columns lists
        ``categories[j][c]`` is the label (int or str, as written) coded ``c``.
    lines : int64 (n_rows,)
        File line (1-based) of each data row.
    columns : list of str
        Column names: the header's, else ``"column 1"``, ``"column 2"``, ...
    index, index_name : str array (n_rows,) or None, str or None
        The index column's values and name (``--index-col``), removed from the labels.
    header : bool
        Whether line 1 was read as a header.
    recoded : list of int
        Columns (0-based positions in ``codes``) whose labels were names.
    file_columns : list of int
        0-based position in the file of each label column.
    index_position : int or None
        0-based position in the file of the index column.
    delimiter : str
        The separator the file was read with ("," unless sniffed: see ``_read_fields``).
    """

    path: str
    codes: np.ndarray
    categories: list
    lines: np.ndarray
    columns: list
    index: np.ndarray | None
    index_name: str | None
    header: bool
    recoded: list
    file_columns: list
    index_position: int | None
    delimiter: str = ","

    def where(self, row: int, col: int | None = None) -> str:
        """``"file: line L, column C ('name')"`` for a 0-based data row and column."""
        text = f"{self.path}: line {int(self.lines[row])}"
        if col is not None:
            text += f", {self.column_label(col)}"
        return text

    def column_label(self, col: int) -> str:
        """``"column C ('name')"``: C counts the file's columns from 1 (index column included)."""
        number = self.file_columns[col] + 1
        name = self.columns[col]
        return f"column {number}" + (f" ({name!r})" if self.header else "")


#: separators tried when a file reads as one column with commas
OTHER_DELIMITERS = (";", "\t", "|")


def _decode(path) -> str:
    """The file's text (UTF-8, an optional byte-order mark); a clear error naming the line
    and byte of the first invalid sequence otherwise."""
    if not os.path.exists(path):
        raise LabelFileError(f"file not found: {path}")
    if os.path.isdir(path):
        raise LabelFileError(f"{path} is a directory, not a file")
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise LabelFileError(
            f"{path}: line {line}, byte {column} of the line: not UTF-8 text (byte "
            f"0x{data[exc.start]:02x}); save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None
    if "\x00" in text:
        i = text.index("\x00")
        raise LabelFileError(f"{path}: line {text.count(chr(10), 0, i) + 1} holds a NUL byte; "
                             "this is not a text CSV file")
    return text


def _parse(path, text, delimiter):
    rows, lines = [], []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter,
                        skipinitialspace=True)
    start = 1
    try:
        for fields in reader:
            rows.append([f.strip() for f in fields])
            lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise LabelFileError(f"{path}: line {reader.line_num}: cannot parse ({exc})") from exc
    for fields, line in zip(rows, lines):
        for c, f in enumerate(fields):
            if "\n" in f or "\r" in f:
                raise LabelFileError(
                    f"{path}: line {line}, column {c + 1}: a quoted field spans several "
                    f"lines ({f[:40]!r}); a label cannot contain a line break")
    return rows, lines


def _sniff(path, text, rows):
    """The separator of a file that reads as one column with commas: another separator
    (``;``, tab, ``|``) found the same number of times on every non-blank line, else
    None.  Refuses a one-column file whose fields hold a separator unevenly."""
    if any(len(r) > 1 for r in rows):
        return None
    fields = [r[0] for r in rows if r and r[0] != ""]
    for d in OTHER_DELIMITERS:
        counts = {f.count(d) for f in fields}
        if counts and min(counts) > 0:
            if len(counts) == 1:
                return d
            raise LabelFileError(
                f"{path}: every line is one field with commas as the separator, and the "
                f"lines hold {d!r} a different number of times; a file of one base "
                "clustering cannot contain separators; write it with commas")
    return None


def _read_fields(path):
    """(rows of stripped fields, their 1-based file lines, separator); ragged or blank
    lines are errors.  Commas by default; a file that reads as one column with commas
    but has ``;``, tab or ``|`` on every line, equally often, is read with that."""
    text = _decode(path)
    rows, lines = _parse(path, text, ",")
    delimiter = _sniff(path, text, rows)
    if delimiter is not None:
        rows, lines = _parse(path, text, delimiter)
    else:
        delimiter = ","
    while rows and not any(rows[-1]):  # trailing blank lines
        rows.pop()
        lines.pop()
    if not rows:
        raise LabelFileError(f"{path} is empty")
    width = len(rows[0])
    for fields, line in zip(rows, lines):
        if fields == [] or (width > 1 and fields == [""]):
            raise LabelFileError(
                f"{path}: line {line} is blank; every line needs one field per column "
                "(write -1 or NA, or leave a field empty between commas, for a missing label)")
        if len(fields) != width:
            raise LabelFileError(
                f"{path}: line {line} has {len(fields)} field(s) but line {lines[0]} has "
                f"{width}; every line needs one field per column (leave a field empty, as in "
                "'3,,1', or write -1 for a missing label)")
    return rows, np.asarray(lines, dtype=np.int64), delimiter


def _as_number(token):
    """float of a numeric field, else None."""
    try:
        return float(token)
    except ValueError:
        return None


def _is_numeric_or_missing(token):
    return token in MISSING_TOKENS or _as_number(token) is not None


def _detect_header(path, rows, header):
    """True if line 1 is a header; ``header`` None means decide from the content, or raise."""
    if header is not None:
        return bool(header)
    first, body = rows[0], rows[1:]
    named = [j for j, t in enumerate(first) if not _is_numeric_or_missing(t)]
    if not named:
        return False
    below = [any(r[j] == first[j] for r in body) for j in named]
    if not any(below):
        return True
    if all(below):
        return False
    j_new = named[below.index(False)]
    j_old = named[below.index(True)]
    raise LabelFileError(
        f"{path}: cannot tell whether line 1 is a header: {first[j_new]!r} (column "
        f"{j_new + 1}) appears nowhere below it but {first[j_old]!r} (column {j_old + 1}) "
        "is also a label further down; pass --header or --no-header")


def _index_position(path, index_col, names, header):
    """0-based position of the index column from a 1-based number or a header name."""
    if index_col is None:
        return None
    text = str(index_col)
    if header and text in names:
        return names.index(text)
    if text.isdigit() and 1 <= int(text) <= len(names):
        return int(text) - 1
    if text.isdigit():
        raise LabelFileError(f"{path}: --index-col {text}: the file has columns 1..{len(names)}")
    known = ", ".join(repr(n) for n in names) if header else "(no header: give a number)"
    raise LabelFileError(f"{path}: --index-col {text!r} is not a column; columns: {known}")


def _column_labels(table, j, tokens):
    """(codes, categories, recoded) of one column; raise on a decimal or a negative number."""
    missing = np.array([t in MISSING_TOKENS for t in tokens])
    numbers = [None if m else _as_number(t) for t, m in zip(tokens, missing)]
    named = any(x is None for x, m in zip(numbers, missing) if not m)
    if named:
        values = [None if m else t for t, m in zip(tokens, missing)]
    else:
        values = []
        for i, (x, m) in enumerate(zip(numbers, missing)):
            if m:
                values.append(None)
                continue
            if not np.isfinite(x) or x != int(x):
                raise LabelFileError(
                    f"{table.where(i, j)}: {tokens[i]!r} is not a label: labels are integers "
                    "or names (a column of decimal numbers looks like a feature; leave it out)")
            if x < 0:
                raise LabelFileError(
                    f"{table.where(i, j)}: {tokens[i]!r}: a negative label other than -1 is "
                    "not allowed (-1 marks a missing label)")
            values.append(int(x))
    categories = sorted({v for v in values if v is not None})
    lookup = {v: c for c, v in enumerate(categories)}
    codes = np.array([-1 if v is None else lookup[v] for v in values], dtype=np.int64)
    return codes, categories, named


def check_observed(table, rows=None, what=""):
    """Raise if a column, or one of ``rows`` (default all), of ``table`` has no observed label."""
    rows = np.arange(table.codes.shape[0]) if rows is None else np.asarray(rows)
    observed = table.codes[rows] >= 0
    for j in np.flatnonzero(~observed.any(axis=0)):
        raise LabelFileError(
            f"{table.path}: {table.column_label(j)} has no observed label{what}; remove it")
    empty = np.flatnonzero(~observed.any(axis=1))
    if empty.size:
        raise LabelFileError(
            f"{table.where(rows[empty[0]])} has no observed label in any base clustering "
            f"({empty.size} such line(s)); remove the line or give it a label")


def read_label_table(path, *, header=None, index_col=None,
                     allow_singletons=False) -> LabelTable:
    """Parse a CSV of base labels (see the module docstring for what it may hold).

    Parameters
    ----------
    path : str
    header : bool or None
        Line 1 is a header (True), is data (False), or decide from the content
        (None): a header when line 1 has a name that occurs nowhere below it in
        its column, data when all of its names occur below; otherwise an error.
    index_col : str, int or None
        Header name or 1-based number of a column of row identifiers.
    allow_singletons : bool
        Accept a column with a different value on every line (a clustering into
        singletons); by default such a column is refused as ID-like.
    """
    rows, lines, delimiter = _read_fields(path)
    has_header = _detect_header(path, rows, header)
    width = len(rows[0])
    names = rows[0] if has_header else [f"column {j + 1}" for j in range(width)]
    body, body_lines = (rows[1:], lines[1:]) if has_header else (rows, lines)
    if not body:
        raise LabelFileError(f"{path} has a header but no lines of labels")
    pos = _index_position(path, index_col, names, has_header)
    keep = [j for j in range(width) if j != pos]
    if not keep:
        raise LabelFileError(f"{path}: no label column is left besides the index column")
    table = LabelTable(path=path, codes=np.empty((0, 0), np.int64), categories=[],
                       lines=body_lines, columns=[names[j] for j in keep],
                       index=None if pos is None else np.array([r[pos] for r in body]),
                       index_name=None if pos is None else names[pos], header=has_header,
                       recoded=[], file_columns=keep, index_position=pos,
                       delimiter=delimiter)
    codes = np.empty((len(body), len(keep)), dtype=np.int64)
    for out_j, j in enumerate(keep):
        col_codes, cats, named = _column_labels(table, out_j, [r[j] for r in body])
        codes[:, out_j] = col_codes
        table.categories.append(cats)
        if named:
            table.recoded.append(out_j)
    table.codes = codes
    check_observed(table)
    if not allow_singletons and len(body) >= MIN_ROWS_ID_CHECK:
        for j in range(codes.shape[1]):
            if (codes[:, j] >= 0).all() and len(table.categories[j]) == len(body):
                raise LabelFileError(
                    f"{path}: {table.column_label(j)} has a different value on each of its "
                    f"{len(body)} lines, so it looks like a row identifier, not a clustering; "
                    f"pass --index-col {table.columns[j] if has_header else keep[j] + 1} "
                    "to use it "
                    "as the row index, or --allow-singletons if it is a clustering into "
                    "singletons")
    return table


def encode_like(train: LabelTable, path, *, unknown="error"):
    """Read a second label file (held-out rows) coded like ``train``.

    Same columns (count, and names when both have a header), same header and
    index-column conventions.  A label that a column never showed in ``train``
    raises (``unknown="error"``) or becomes missing (``"missing"``).

    Returns
    -------
    table : LabelTable
        The file's rows with ``codes`` in ``train``'s coding.
    n_unknown : int
        Labels turned into missing.
    """
    index_col = None
    if train.index_position is not None:  # by name where there is a header, else by position
        index_col = train.index_name if train.header else train.index_position + 1
    other = read_label_table(path, header=train.header, index_col=index_col,
                             allow_singletons=True)
    if len(other.columns) != len(train.columns):
        raise LabelFileError(
            f"{path} has {len(other.columns)} label column(s) but {train.path} has "
            f"{len(train.columns)}")
    if train.header and other.columns != train.columns:
        j = next(j for j, (a, b) in enumerate(zip(other.columns, train.columns)) if a != b)
        raise LabelFileError(
            f"{path}: {other.column_label(j)} should be {train.columns[j]!r} as in {train.path}")
    codes = np.full(other.codes.shape, -1, dtype=np.int64)
    n_unknown = 0
    for j in range(codes.shape[1]):
        lookup = {v: c for c, v in enumerate(train.categories[j])}
        for i, c in enumerate(other.codes[:, j]):
            if c < 0:
                continue
            value = other.categories[j][c]
            if j in train.recoded and not isinstance(value, str):
                value = str(value)
            if j not in train.recoded and isinstance(value, str):
                x = _as_number(value)  # the column held integers in training
                value = int(x) if x is not None and float(x).is_integer() else None
            if value in lookup:
                codes[i, j] = lookup[value]
            elif unknown == "missing":
                n_unknown += 1
            else:
                raise LabelFileError(
                    f"{other.where(i, j)}: label {other.categories[j][c]!r} never occurs in "
                    f"this column of {train.path}; pass --unknown-labels missing to count such "
                    "labels as missing")
    other.codes = codes
    other.categories = train.categories
    return other, n_unknown


def read_feature_table(path, n_rows, *, header=None):
    """A numeric feature matrix (n_rows, n_features) from a CSV; NaN or empty = missing."""
    rows, lines, _ = _read_fields(path)
    if header is None:
        header = not all(_is_numeric_or_missing(t) for t in rows[0])
    body, body_lines = (rows[1:], lines[1:]) if header else (rows, lines)
    if len(body) != n_rows:
        raise LabelFileError(
            f"{path} has {len(body)} lines of features but the label file has {n_rows}")
    F = np.empty((len(body), len(rows[0])), dtype=np.float64)
    for i, (fields, line) in enumerate(zip(body, body_lines)):
        for j, token in enumerate(fields):
            x = np.nan if token in MISSING_TOKENS - {"-1"} else _as_number(token)
            if x is None or np.isinf(x):
                raise LabelFileError(
                    f"{path}: line {line}, column {j + 1}: {token!r} is not a finite number")
            F[i, j] = x
    for j in np.flatnonzero(np.isnan(F).all(axis=0)):
        raise LabelFileError(f"{path}: column {j + 1} has no feature value; remove it")
    return F
