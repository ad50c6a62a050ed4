"""A list answer's records as a table the user sorts, totals and downloads (issue 40).

The items the app merged from every chunk's list (``answers.merge_items``, kept in the scene's
``chunk-item`` notes) are rows: the item, its value and unit as typed, where the file has it.  What
people ask of records (a count, a sum, an average, the smallest and largest, per unit or per item) is
computed here by SQLite's in-memory database, from the rows alone: no model call and no second read of
the file, and no guess at what a follow-up question means.  Every figure says its operation ("sum of
12 values in mg").  Values are only ever combined within one unit.
"""

from __future__ import annotations

import csv
import io
import sqlite3
from dataclasses import dataclass

SORTS = {"n": "n", "item": "item COLLATE NOCASE", "value": "value", "unit": "unit", "where": "line"}
OPS = {"count": ("COUNT(*)", "count", "record"), "sum": ("SUM(value)", "sum", "value"),
       "avg": ("AVG(value)", "average", "value"), "min": ("MIN(value)", "smallest", "value"),
       "max": ("MAX(value)", "largest", "value")}
GROUPS = {"unit": ("unit",), "item": ("item", "unit")}


@dataclass(frozen=True)
class Row:
    n: int
    item: str
    value: float | None
    unit: str
    line: int | None
    chunk: int
    quote: str


@dataclass(frozen=True)
class Figure:
    """One computed figure: its group (the item, or "" per unit), unit, value, and how many rows."""

    group: str
    unit: str
    value: float | None
    rows: int


def rows_of(items: list[dict]) -> list[Row]:
    """The table's rows from the scene's items (``notes.read_computed(...).items``), numbered in the
    file's order."""
    out = []
    for n, it in enumerate(items, 1):
        value = it.get("value")
        out.append(Row(n, str(it.get("text") or ""), float(value) if isinstance(value, (int, float))
                       and not isinstance(value, bool) else None, str(it.get("unit") or ""),
                       it.get("line") if isinstance(it.get("line"), int) else None, int(it.get("chunk") or 0),
                       str(it.get("quote") or "")))
    return out


def _database(rows: list[Row]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE records (n INTEGER, item TEXT, value REAL, unit TEXT, line INTEGER, chunk INTEGER, "
               "quote TEXT)")
    db.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [(r.n, r.item, r.value, r.unit, r.line, r.chunk, r.quote) for r in rows])
    return db


def sorted_rows(rows: list[Row], sort: str = "n", descending: bool = False) -> list[Row]:
    """The rows ordered by a column (``SORTS``; rows without a value last either way)."""
    order = SORTS.get(sort, "n")
    db = _database(rows)
    try:
        found = db.execute(f"SELECT n FROM records ORDER BY {order} IS NULL, {order} {'DESC' if descending else 'ASC'}, n")
        by_n = {r.n: r for r in rows}
        return [by_n[n] for (n,) in found]
    finally:
        db.close()


def aggregate(rows: list[Row], op: str, by: str = "unit") -> list[Figure]:
    """``op`` (``OPS``) of the rows' values, one figure per unit, or per item and unit (``by``="item");
    a count counts records, the others only the rows that carry a value."""
    expression = OPS[op][0] if op in OPS else OPS["count"][0]
    keys = GROUPS.get(by, GROUPS["unit"])
    db = _database(rows)
    try:
        where = "" if op == "count" else "WHERE value IS NOT NULL"
        group = ", ".join(keys)
        query = (f"SELECT {'item' if by == 'item' else 'NULL'}, unit, {expression}, COUNT(*) FROM records {where} "
                 f"GROUP BY {group} ORDER BY {group}")
        return [Figure(g or "", u or "", v, c) for g, u, v, c in db.execute(query)]
    finally:
        db.close()


def said(op: str, figure: Figure) -> str:
    """How a figure says its operation: "sum of 12 values in mg", "count of 3 records"."""
    name, noun = OPS.get(op, OPS["count"])[1:]
    return (f"{name} of {figure.rows:,} {noun}{'s' if figure.rows != 1 else ''}"
            + (f" in {figure.unit}" if figure.unit else "") + (f" for “{figure.group}”" if figure.group else ""))


def csv_text(rows: list[Row]) -> str:
    """The rows as CSV (item, value, unit, line, chunk, quote), for a spreadsheet."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["n", "item", "value", "unit", "line", "chunk", "quote"])
    for r in rows:
        writer.writerow([r.n, _cell(r.item), "" if r.value is None else repr(r.value).removesuffix(".0"), r.unit,
                         r.line or "", r.chunk, _cell(r.quote)])
    return out.getvalue()


def _cell(text: str) -> str:
    """A cell a spreadsheet will not run as a formula (CSV injection)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
