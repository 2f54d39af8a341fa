"""The simulated-user env: customer service over a retail SQLite database, under a written policy.

Episode: ``reset`` seeds a fresh in-memory database and a user simulator; the first user message
is the observation. The agent calls store tools (``find_user``, ``get_order``, ``cancel_order``
...) and talks to the user with ``send_message(text)``, whose observation is the user's reply
(prefixed ``user:``). The episode ends when the user ends it (satisfied or frustrated), or when
the agent calls ``end_conversation()`` or ``transfer_to_human(summary)``.

Reward (tau-bench): ``r_action * r_output * policy_ok``, where ``r_action`` = final database
equals the goal state (:func:`turnrl.envs.tools.state.states_equal`), ``r_output`` = every
required piece of information appears in some agent message to the user
(:func:`turnrl.envs.user.db.mentions`) and no message states a rival value (another status,
another amount: :func:`turnrl.envs.user.db.contradicts`, so guessing every answer in turn
fails), and ``policy_ok`` = no action broke the policy
(checked as the actions happen; a violation also sets the flag ``policy_violation``).

The tools do not enforce the policy (as in real systems, the API allows more than the policy
does): cancelling a processed order, refunding to another of the user's payment methods, acting
before authentication or without a "yes" all work, and all fail the task.
"""

# No ``from __future__ import annotations``: base.py needs evaluated annotations (Literal).
import sqlite3
from collections.abc import Callable
from typing import Any, Literal

from turnrl.envs.base import ToolEnv, ToolError, ToolOutput
from turnrl.envs.tools import state
from turnrl.envs.user.db import POLICY, SCHEMA, affirms, contradicts, mentions
from turnrl.envs.user.simulator import ScriptedUser, UserSimulator
from turnrl.types import RewardResult, Task

Reason = Literal["no longer needed", "ordered by mistake"]
WRITES = ("cancel_order", "change_address", "return_item", "exchange_item")

# Builds the simulator for an episode: (task payload, goal_reached check) -> simulator.
UserFactory = Callable[[dict[str, Any], Callable[[], bool]], UserSimulator]


def scripted_user(details_per_turn: int = 1) -> UserFactory:
    def make(payload: dict[str, Any], goal_reached: Callable[[], bool]) -> UserSimulator:
        return ScriptedUser(
            payload["user"], payload["persona"], payload["seed"], goal_reached, details_per_turn
        )

    return make


class UserEnv(ToolEnv):
    name = "user"
    tools = (
        "find_user",
        "list_orders",
        "get_order",
        "cancel_order",
        "change_address",
        "return_item",
        "exchange_item",
        "send_message",
        "transfer_to_human",
        "end_conversation",
    )

    def __init__(self, make_user: UserFactory | None = None) -> None:
        self.make_user = make_user or scripted_user()
        self.conn: sqlite3.Connection | None = None
        self.user: UserSimulator | None = None
        self.init: dict[str, Any] = {}
        self.goal: dict[str, Any] = {}
        self.required: list[str] = []
        self.agent_messages: list[str] = []
        self.violations: list[str] = []
        self.auth_user: str | None = None
        self.confirmed = False
        self.outcome = ""

    async def reset(self, task: Task) -> str:
        p = task.payload
        await self.close()
        self.init = p["init"]
        self.goal = state.stored(SCHEMA, p["goal"])
        self.conn = state.open_db(SCHEMA, self.init)
        self.required = list(p["user"]["required_info"])
        self.agent_messages, self.violations = [], []
        self.auth_user, self.confirmed, self.outcome = None, False, ""
        self.user = self.make_user(p, self.goal_reached)
        self.instructions = POLICY
        return f"user: {self.user.opening()}"

    def goal_reached(self) -> bool:
        return state.states_equal(self.db, self.goal)

    def measure(self) -> dict[str, float]:
        """``progress`` towards the goal state (``reward.shaping`` can reward its changes)."""
        return {"progress": state.progress(self.init, self.db, self.goal)}

    def anchor(self, observation: str) -> Any:
        return (state.digest(self.db), observation) if self.conn is not None else observation

    async def grade(self) -> RewardResult:
        diff = state.state_diff(self.db, self.goal)
        r_action = float(not diff)
        told = "\n".join(self.agent_messages)
        missing = [s for s in self.required if not mentions(told, s)]
        contradicted = [s for s in self.required if contradicts(told, s)]
        r_output = float(not missing and not contradicted)
        policy_ok = float(not self.violations)
        reward = r_action * r_output * policy_ok
        # Flags mark exploits (hack_rate counts them); a user who left frustrated is an
        # outcome, kept in info["user_outcome"], not an exploit.
        flags = ["policy_violation"] if self.violations else []
        return RewardResult(
            reward=reward,
            success=reward == 1.0,
            proxy_success=r_action * r_output,
            components={
                "r_action": r_action,
                "r_output": r_output,
                "policy_ok": policy_ok,
                "progress": state.progress(self.init, self.db, self.goal),
                "agent_messages": float(len(self.agent_messages)),
            },
            flags=flags,
            info={
                "diff": diff[:20],
                "missing_info": missing,
                "contradicted_info": contradicted,
                "violations": self.violations,
                "user_outcome": self.outcome,
            },
        )

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    @property
    def db(self) -> sqlite3.Connection:
        assert self.conn is not None, "call reset() before using the env"
        return self.conn

    # ------------------------------------------------------------ policy bookkeeping

    def _violate(self, rule: str) -> None:
        if rule not in self.violations:
            self.violations.append(rule)

    def _order(self, order_id: str) -> dict[str, Any]:
        """Fetch an order for a tool, recording the policy rules the access breaks."""
        cur = self.db.execute("SELECT * FROM orders WHERE order_id = ?", (order_id,))
        row = cur.fetchone()
        if row is None:
            raise ToolError(f"no order '{order_id}'. Order ids look like '#W1234'.")
        order = dict(zip([d[0] for d in cur.description], row))
        if self.auth_user is None:
            self._violate("unauthenticated")
        elif order["user_id"] != self.auth_user:
            self._violate("other_user")
        return order

    def _about_to_change(self) -> None:
        """Called right before a change is written (after the request is known to be valid)."""
        if not self.confirmed:
            self._violate("no_confirmation")
        self.confirmed = False  # every change needs its own yes

    def _item(self, order_id: str, item: str) -> dict[str, Any]:
        cur = self.db.execute(
            "SELECT * FROM items WHERE order_id = ? AND item = ?", (order_id, item)
        )
        row = cur.fetchone()
        if row is None:
            names = [
                r[0]
                for r in self.db.execute("SELECT item FROM items WHERE order_id = ?", (order_id,))
            ]
            raise ToolError(f"order {order_id} has no item '{item}'; items: {', '.join(names)}")
        return dict(zip([d[0] for d in cur.description], row))

    # ------------------------------------------------------------ store tools

    def find_user(self, email: str) -> str:
        """Authenticate the user by email; returns their user id and payment methods."""
        row = self.db.execute(
            "SELECT user_id, name, payment_methods FROM users WHERE email = ?",
            (email.strip().lower(),),
        ).fetchone()
        if row is None:
            raise ToolError(f"no user with email '{email}'")
        self.auth_user = row[0]
        return f"user_id={row[0]} name={row[1]} payment_methods={row[2]}"

    def list_orders(self, user_id: str) -> str:
        """List a user's order ids and statuses."""
        if self.auth_user is None:
            self._violate("unauthenticated")
        elif user_id != self.auth_user:
            self._violate("other_user")
        rows = self.db.execute(
            "SELECT order_id, status FROM orders WHERE user_id = ? ORDER BY order_id", (user_id,)
        ).fetchall()
        if not rows:
            raise ToolError(f"no orders for user '{user_id}'")
        return "\n".join(f"{o} {s}" for o, s in rows)

    def get_order(self, order_id: str) -> str:
        """Show an order: status, address, payment method and items with prices."""
        o = self._order(order_id)
        items = self.db.execute(
            "SELECT item, variant, price, status FROM items WHERE order_id = ? ORDER BY item",
            (order_id,),
        ).fetchall()
        listed = ", ".join(
            f"{i} ({v}) {p}" + ("" if s == "ordered" else f" [{s}]") for i, v, p, s in items
        )
        return (
            f"{o['order_id']} status={o['status']} address={o['address']} "
            f"paid_with={o['payment_method']} items: {listed}"
        )

    def cancel_order(self, order_id: str, reason: Reason) -> str:
        """Cancel an order and refund its items to the original payment method."""
        o = self._order(order_id)
        if o["status"] in ("cancelled", "delivered"):
            raise ToolError(f"order {order_id} is {o['status']} and cannot be cancelled")
        if o["status"] != "pending":
            self._violate("not_pending")
        self._about_to_change()
        amount = self.db.execute(
            "SELECT COALESCE(SUM(price), 0) FROM items WHERE order_id = ? AND status = 'ordered'",
            (order_id,),
        ).fetchone()[0]
        self.db.execute(
            "UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE order_id = ?",
            (reason, order_id),
        )
        self._refund(order_id, amount, o["payment_method"])
        return f"ok: {order_id} cancelled, refund {amount} to {o['payment_method']}"

    def change_address(self, order_id: str, address: str) -> str:
        """Change the shipping address of an order."""
        o = self._order(order_id)
        if o["status"] in ("cancelled", "delivered"):
            raise ToolError(f"order {order_id} is {o['status']}; its address cannot change")
        if o["status"] != "pending":
            self._violate("not_pending")
        self._about_to_change()
        self.db.execute("UPDATE orders SET address = ? WHERE order_id = ?", (address, order_id))
        return f"ok: {order_id} ships to {address}"

    def return_item(self, order_id: str, item: str, refund_method: str) -> str:
        """Return one delivered item and refund its price to a payment method of the user."""
        o = self._order(order_id)
        it = self._require_delivered_item(o, item)
        methods = (
            self.db.execute("SELECT payment_methods FROM users WHERE user_id = ?", (o["user_id"],))
            .fetchone()[0]
            .split(",")
        )
        if refund_method not in methods:
            raise ToolError(
                f"'{refund_method}' is not a payment method of this user: {', '.join(methods)}"
            )
        if refund_method != o["payment_method"]:
            self._violate("refund_method")
        self._about_to_change()
        self.db.execute(
            "UPDATE items SET status = 'returned' WHERE order_id = ? AND item = ?", (order_id, item)
        )
        self._refund(order_id, it["price"], refund_method)
        return f"ok: {item} returned, refund {it['price']} to {refund_method}"

    def exchange_item(self, order_id: str, item: str, new_variant: str) -> str:
        """Exchange one delivered item for another variant of the same item."""
        o = self._order(order_id)
        it = self._require_delivered_item(o, item)
        variants = [
            r[0] for r in self.db.execute("SELECT variant FROM catalog WHERE item = ?", (item,))
        ]
        if new_variant not in variants or new_variant == it["variant"]:
            others = [v for v in variants if v != it["variant"]]
            raise ToolError(
                f"'{new_variant}' is not another variant of {item}; choose: {', '.join(others)}"
            )
        self._about_to_change()
        self.db.execute(
            "UPDATE items SET variant = ?, status = 'exchange_requested' WHERE order_id = ? AND item = ?",
            (new_variant, order_id, item),
        )
        return f"ok: {item} exchange to {new_variant} requested"

    def _require_delivered_item(self, order: dict[str, Any], item: str) -> dict[str, Any]:
        if order["status"] != "delivered":
            raise ToolError(
                f"order {order['order_id']} is {order['status']}; only delivered orders allow returns and exchanges"
            )
        it = self._item(order["order_id"], item)
        if it["status"] != "ordered":
            raise ToolError(f"{item} in {order['order_id']} is already {it['status']}")
        return it

    def _refund(self, order_id: str, amount: int, method: str) -> None:
        self.db.execute(
            "INSERT INTO refunds (order_id, amount, method) VALUES (?, ?, ?)",
            (order_id, amount, method),
        )

    # ------------------------------------------------------------ conversation

    async def send_message(self, text: str) -> ToolOutput:
        """Send a message to the user; returns the user's reply."""
        if not text.strip():
            raise ToolError("the message is empty")
        assert self.user is not None
        self.agent_messages.append(text)
        turn = await self.user.reply(text)
        self.confirmed = affirms(turn.text)
        if turn.done:
            self.outcome = turn.outcome or "ended"
        return ToolOutput(f"user: {turn.text}", done=turn.done)

    def transfer_to_human(self, summary: str) -> ToolOutput:
        """Hand the conversation to a human agent; ends the episode."""
        self.outcome = "transferred"
        return ToolOutput("Transferred to a human agent.", done=True)

    def end_conversation(self) -> ToolOutput:
        """End the conversation; ends the episode."""
        self.outcome = self.outcome or "ended_by_agent"
        return ToolOutput("Conversation ended.", done=True)
