"""Database state checks: seed a per-episode SQLite database, snapshot it, compare to a goal.

The comparison is order-independent: each table is a *multiset* of rows (a ``Counter`` of
rows), and two states are equal when every table holds the same multiset. Why multisets: the
goal is a set of facts, not a history; two correct solutions may insert rows in a different
order (rowids differ) or delete-and-recreate instead of update (surrogate keys differ). So:

- row order and rowid never matter;
- columns named in ``ignore`` (default: ``id``, the autoincrement surrogate keys) are dropped
  before comparing; natural keys (a file's path, an order id like ``#W1001``) are compared;
- a table missing on one side counts as empty;
- every other difference fails: a *missing* row is a change not made (or a row destroyed), an
  *unexpected* row is a change nobody asked for. Tables are read in full (``SELECT *``), so an
  extra destructive change anywhere fails the check.

A state is given either as an open ``sqlite3.Connection`` or as plain rows
(``{table: [{column: value}, ...]}``, as stored in task payloads).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

Row = tuple[tuple[str, Any], ...]  # sorted (column, value) pairs
State = dict[str, Counter[Row]]  # table -> multiset of rows
Rows = Mapping[str, Iterable[Mapping[str, Any]]]  # table -> rows as dicts (JSON payloads)
StateLike = sqlite3.Connection | Rows | State

IGNORE: tuple[str, ...] = ("id",)


def open_db(schema: str, rows: Rows) -> sqlite3.Connection:
    """A fresh in-memory database with ``schema`` and the given rows: one per episode, so
    concurrent episodes never share state."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)  # tools run on threads
    conn.executescript(schema)
    for table, table_rows in rows.items():
        for row in table_rows:
            cols = list(row)
            marks = ", ".join("?" for _ in cols)
            conn.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})",
                [row[c] for c in cols],
            )
    conn.commit()
    return conn


def stored(schema: str, rows: Rows) -> dict[str, list[dict[str, Any]]]:
    """``rows`` as the database would hold them (column defaults filled, values coerced by
    the column types), so a goal written in a payload compares like a real state."""
    conn = open_db(schema, rows)
    try:
        return dump(conn)
    finally:
        conn.close()


def dump(conn: sqlite3.Connection) -> dict[str, list[dict[str, Any]]]:
    """All tables as plain rows (in rowid order), e.g. to store a state in JSON."""
    out: dict[str, list[dict[str, Any]]] = {}
    for table in _tables(conn):
        cur = conn.execute(f"SELECT * FROM {table} ORDER BY rowid")
        cols = [d[0] for d in cur.description]
        out[table] = [dict(zip(cols, r)) for r in cur.fetchall()]
    return out


def snapshot(db: StateLike, ignore: Collection[str] = IGNORE) -> State:
    """The state as ``{table: Counter(rows)}`` with the ``ignore`` columns dropped."""
    if isinstance(db, sqlite3.Connection):
        db = dump(db)
    state: State = {}
    for table, rows in db.items():
        if isinstance(rows, Counter):  # already a snapshot
            state[table] = Counter(rows)
            continue
        state[table] = Counter(
            tuple(sorted((k, v) for k, v in row.items() if k not in ignore)) for row in rows
        )
    return state


def state_diff(actual: StateLike, goal: StateLike, ignore: Collection[str] = IGNORE) -> list[str]:
    """Human-readable differences from ``goal`` to ``actual``; empty means equal.

    ``"events: missing {...}"`` — a goal row the actual state lacks (change not made, or a row
    destroyed); ``"events: unexpected {...}"`` — a row the goal does not have (an extra change).
    """
    a, g = snapshot(actual, ignore), snapshot(goal, ignore)
    problems: list[str] = []
    for table in sorted(set(a) | set(g)):
        have, want = a.get(table, Counter()), g.get(table, Counter())
        for row, n in sorted((want - have).items(), key=repr):
            problems.append(f"{table}: missing {_fmt(row)}" + (f" x{n}" if n > 1 else ""))
        for row, n in sorted((have - want).items(), key=repr):
            problems.append(f"{table}: unexpected {_fmt(row)}" + (f" x{n}" if n > 1 else ""))
    return problems


def states_equal(actual: StateLike, goal: StateLike, ignore: Collection[str] = IGNORE) -> bool:
    """True when every table holds the same multiset of rows (see module docstring)."""
    return not state_diff(actual, goal, ignore)


def distance(a: StateLike, b: StateLike, ignore: Collection[str] = IGNORE) -> int:
    """Size of the multiset symmetric difference summed over tables (rows to add + remove)."""
    sa, sb = snapshot(a, ignore), snapshot(b, ignore)
    total = 0
    for table in set(sa) | set(sb):
        x, y = sa.get(table, Counter()), sb.get(table, Counter())
        total += sum((x - y).values()) + sum((y - x).values())
    return total


def progress(
    initial: StateLike, current: StateLike, goal: StateLike, ignore: Collection[str] = IGNORE
) -> float:
    """Share of the way from the initial state to the goal: 1 - d(current, goal) / d(initial, goal).

    1.0 at the goal, 0.0 at the start, negative after changes that move away from the goal (an
    extra destructive change costs as much as a missing one). When the goal equals the initial
    state (nothing to change), it is 1.0 minus the number of rows changed.
    """
    d0 = distance(initial, goal, ignore)
    d = distance(current, goal, ignore)
    return 1.0 - d / d0 if d0 else 1.0 - d


def extra_changes(
    initial: StateLike, current: StateLike, goal: StateLike, ignore: Collection[str] = IGNORE
) -> list[str]:
    """Changes made (initial -> current) that the goal does not ask for (initial -> goal).

    ``"files: removed {...}"`` is a destructive change (a row the goal keeps was deleted or
    overwritten); ``"files: added {...}"`` a row the goal does not contain.
    """
    i, c, g = (snapshot(x, ignore) for x in (initial, current, goal))
    out: list[str] = []
    for table in sorted(set(i) | set(c) | set(g)):
        ti, tc, tg = (s.get(table, Counter()) for s in (i, c, g))
        for row in sorted(((ti - tc) - (ti - tg)).elements(), key=repr):
            out.append(f"{table}: removed {_fmt(row)}")
        for row in sorted(((tc - ti) - (tg - ti)).elements(), key=repr):
            out.append(f"{table}: added {_fmt(row)}")
    return out


def digest(db: StateLike, ignore: Collection[str] = ()) -> str:
    """A short hash of the state (ids kept by default): equal states give equal digests."""
    state = snapshot(db, ignore)
    canon = repr(sorted((t, sorted(c.items(), key=repr)) for t, c in state.items() if c))
    return hashlib.sha1(canon.encode()).hexdigest()[:16]


def _tables(conn: sqlite3.Connection) -> list[str]:
    cur = conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY name"
    )
    return [r[0] for r in cur.fetchall()]


def _fmt(row: Row) -> str:
    return "{" + ", ".join(f"{k}={v!r}" for k, v in row) + "}"
