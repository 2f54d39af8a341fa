"""The tool-API env: multi-step function calling against stateful APIs in a per-episode SQLite DB.

Three small APIs share one database: a file store (``files``), a calendar (``events``) and a
bank ledger (``accounts`` + ``transfers``). Each episode opens its own in-memory database seeded
from the task, so concurrent episodes never interfere. The agent ends the episode with
``done()``.

Grading is a state check (:mod:`turnrl.envs.tools.state`): success iff the final database equals
the goal state (per-table row multisets; autoincrement ``id`` columns ignored). Any extra change
(deleting another file, an extra transfer) fails it. The env measures its ``progress`` towards
the goal (see :func:`state.progress`) after every turn; ``reward.shaping={progress: 1.0}``
turns its changes into per-turn rewards, which then sum to the episode's final progress.

Tools shown per episode: only those of the task's domains plus ``done`` (fewer schemas keep a
tiny model's prompt short); ``narrow_tools=False`` shows all of them.
"""

# No ``from __future__ import annotations`` here: base.py reads tool signatures without
# evaluating string annotations, so aliases like ``Day`` must be real objects.
import sqlite3
from typing import Annotated, Any, Literal

from pydantic import Field

from turnrl.envs.base import ToolEnv, ToolError, ToolOutput
from turnrl.envs.tools import state
from turnrl.types import RewardResult, Task

SCHEMA = """
CREATE TABLE files (path TEXT PRIMARY KEY, content TEXT NOT NULL);
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
                     day TEXT NOT NULL, hour INTEGER NOT NULL);
CREATE TABLE accounts (name TEXT PRIMARY KEY, balance INTEGER NOT NULL);
CREATE TABLE transfers (id INTEGER PRIMARY KEY AUTOINCREMENT, src TEXT NOT NULL,
                        dst TEXT NOT NULL, amount INTEGER NOT NULL);
"""

DOMAIN_TOOLS = {
    "files": ("list_files", "read_file", "write_file", "delete_file", "move_file"),
    "calendar": ("list_events", "add_event", "cancel_event", "move_event"),
    "bank": ("get_balance", "transfer"),
}

INSTRUCTIONS = (
    "You operate a small workspace through tools. Do exactly what the task asks, change "
    "nothing else, then call done()."
)

Day = Literal["mon", "tue", "wed", "thu", "fri"]
Hour = Annotated[int, Field(ge=0, le=23)]
Amount = Annotated[int, Field(gt=0)]


class ToolsEnv(ToolEnv):
    name = "tools"
    tools = (*(t for ts in DOMAIN_TOOLS.values() for t in ts), "done")

    def __init__(self, narrow_tools: bool = True) -> None:
        self.narrow_tools = narrow_tools
        self.conn: sqlite3.Connection | None = None
        self.init: dict[str, Any] = {}
        self.goal: dict[str, Any] = {}
        self.finished = False

    async def reset(self, task: Task) -> str:
        p = task.payload
        self.init = p["init"]
        self.goal = state.stored(SCHEMA, p["goal"])
        if self.conn is not None:
            self.conn.close()
        self.conn = state.open_db(SCHEMA, self.init)
        self.finished = False
        if self.narrow_tools:  # instance attribute shadows the class list for this episode
            self.tools = (*(t for d in p["domains"] for t in DOMAIN_TOOLS[d]), "done")
        self.instructions = INSTRUCTIONS
        return p["statement"]

    def measure(self) -> dict[str, float]:
        return {"progress": state.progress(self.init, self.db, self.goal)}

    def anchor(self, observation: str) -> Any:
        """The database digest: two steps that left the same database are in the same state."""
        return state.digest(self.db) if self.conn is not None else observation

    async def grade(self) -> RewardResult:
        diff = state.state_diff(self.db, self.goal)
        ok = not diff
        extra = state.extra_changes(self.init, self.db, self.goal)
        flags = ["extra_change"] if extra else []
        if any(": removed " in e for e in extra):
            flags.append("destructive_change")
        return RewardResult(
            reward=float(ok),
            success=ok,
            proxy_success=float(ok),
            components={
                "state_match": float(ok),
                "progress": state.progress(self.init, self.db, self.goal),
                "called_done": float(self.finished),
            },
            flags=flags,
            info={"diff": diff[:20], "extra_changes": extra[:20]},
        )

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    @property
    def db(self) -> sqlite3.Connection:
        assert self.conn is not None, "call reset() before using the env"
        return self.conn

    # ------------------------------------------------------------ files

    def list_files(self, prefix: str = "") -> str:
        """List file paths, optionally only those starting with a prefix such as 'notes/'."""
        rows = self.db.execute(
            "SELECT path FROM files WHERE substr(path, 1, ?) = ? ORDER BY path",
            (len(prefix), prefix),
        ).fetchall()
        return "\n".join(r[0] for r in rows) or "(no files)"

    def read_file(self, path: str) -> str:
        """Return the text of a file."""
        return self._file(path)

    def write_file(self, path: str, content: str) -> str:
        """Create a file, or replace the text of an existing one."""
        if not path or path.endswith("/"):
            raise ToolError(f"'{path}' is not a file path; use a path like 'notes/a.txt'")
        self.db.execute(
            "INSERT OR REPLACE INTO files (path, content) VALUES (?, ?)", (path, content)
        )
        return "ok"

    def delete_file(self, path: str) -> str:
        """Delete a file."""
        self._file(path)
        self.db.execute("DELETE FROM files WHERE path = ?", (path,))
        return "ok"

    def move_file(self, src: str, dst: str) -> str:
        """Move or rename a file from src to dst."""
        self._file(src)
        if self._exists(dst):
            raise ToolError(f"'{dst}' already exists; delete it first or pick another path")
        self.db.execute("UPDATE files SET path = ? WHERE path = ?", (dst, src))
        return "ok"

    def _exists(self, path: str) -> bool:
        return self.db.execute("SELECT 1 FROM files WHERE path = ?", (path,)).fetchone() is not None

    def _file(self, path: str) -> str:
        row = self.db.execute("SELECT content FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            raise ToolError(f"no file '{path}'. Use list_files to see the paths.")
        return row[0]

    # ------------------------------------------------------------ calendar

    def list_events(self, day: Day) -> str:
        """List the events of a day (mon..fri) with their ids and hours."""
        rows = self.db.execute(
            "SELECT id, hour, title FROM events WHERE day = ? ORDER BY hour, id", (day,)
        ).fetchall()
        return "\n".join(f"id={i} {h}:00 {t}" for i, h, t in rows) or f"(no events on {day})"

    def add_event(self, title: str, day: Day, hour: Hour) -> str:
        """Add a one-hour event; the hour must be free."""
        self._check_free(day, hour)
        cur = self.db.execute(
            "INSERT INTO events (title, day, hour) VALUES (?, ?, ?)", (title, day, hour)
        )
        return f"ok id={cur.lastrowid}"

    def cancel_event(self, event_id: int) -> str:
        """Cancel (delete) an event by its id."""
        self._event(event_id)
        self.db.execute("DELETE FROM events WHERE id = ?", (event_id,))
        return "ok"

    def move_event(self, event_id: int, day: Day, hour: Hour) -> str:
        """Move an event to another day and hour; the new hour must be free."""
        self._event(event_id)
        self._check_free(day, hour, except_id=event_id)
        self.db.execute("UPDATE events SET day = ?, hour = ? WHERE id = ?", (day, hour, event_id))
        return "ok"

    def _event(self, event_id: int) -> None:
        if self.db.execute("SELECT 1 FROM events WHERE id = ?", (event_id,)).fetchone() is None:
            raise ToolError(f"no event with id {event_id}. Use list_events to see the ids.")

    def _check_free(self, day: str, hour: int, except_id: int = -1) -> None:
        row = self.db.execute(
            "SELECT title FROM events WHERE day = ? AND hour = ? AND id != ?",
            (day, hour, except_id),
        ).fetchone()
        if row is not None:
            raise ToolError(f"{day} {hour}:00 is taken by '{row[0]}'")

    # ------------------------------------------------------------ bank

    def get_balance(self, account: str) -> str:
        """Return the balance of an account."""
        return f"{account}: {self._balance(account)}"

    def transfer(self, src: str, dst: str, amount: Amount) -> str:
        """Move a whole-number amount from account src to account dst."""
        have = self._balance(src)
        self._balance(dst)
        if src == dst:
            raise ToolError("src and dst must be different accounts")
        if amount > have:
            raise ToolError(f"insufficient funds: {src} has {have}")
        self.db.execute("UPDATE accounts SET balance = balance - ? WHERE name = ?", (amount, src))
        self.db.execute("UPDATE accounts SET balance = balance + ? WHERE name = ?", (amount, dst))
        self.db.execute(
            "INSERT INTO transfers (src, dst, amount) VALUES (?, ?, ?)", (src, dst, amount)
        )
        return f"ok {src}={have - amount} {dst}={self._balance(dst)}"

    def _balance(self, account: str) -> int:
        row = self.db.execute("SELECT balance FROM accounts WHERE name = ?", (account,)).fetchone()
        if row is None:
            names = [r[0] for r in self.db.execute("SELECT name FROM accounts ORDER BY name")]
            raise ToolError(f"unknown account '{account}'; accounts: {', '.join(names)}")
        return row[0]

    # ------------------------------------------------------------ finish

    def done(self) -> ToolOutput:
        """Call when the task is complete; ends the episode."""
        self.finished = True
        return ToolOutput("Episode finished.", done=True)
