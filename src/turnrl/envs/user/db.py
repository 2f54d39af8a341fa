"""The retail domain: database schema, the written policy, and the "was it told" checks."""

from __future__ import annotations

import re

SCHEMA = """
CREATE TABLE users (user_id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL UNIQUE,
                    payment_methods TEXT NOT NULL);
CREATE TABLE orders (order_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, status TEXT NOT NULL,
                     address TEXT NOT NULL, payment_method TEXT NOT NULL,
                     cancel_reason TEXT);
CREATE TABLE items (order_id TEXT NOT NULL, item TEXT NOT NULL, variant TEXT NOT NULL,
                    price INTEGER NOT NULL, status TEXT NOT NULL DEFAULT 'ordered',
                    PRIMARY KEY (order_id, item));
CREATE TABLE refunds (id INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT NOT NULL,
                      amount INTEGER NOT NULL, method TEXT NOT NULL);
CREATE TABLE catalog (item TEXT NOT NULL, variant TEXT NOT NULL);
"""

# Short on purpose: a tiny model reads it every episode. Each rule is checked by the env.
POLICY = """You are a retail support agent. Talk to the user only with send_message.
Policy:
1. First authenticate: ask for the user's email and call find_user. Do not look up or change any order before that, and touch only that user's orders.
2. Before any change, describe it and get an explicit yes from the user.
3. Only pending orders can be cancelled or get a new address.
4. Only delivered orders can have an item returned or exchanged (same item, other variant).
5. Refunds go only to the order's original payment method.
6. Tell the user the outcome (status, refund amount). Call end_conversation when they are done."""


def mentions(text: str, info: str) -> bool:
    """Whether ``text`` states ``info`` as a whole word/number (case-insensitive). A number
    inside an order id (``42`` in ``#W1042``) does not count."""
    pattern = r"(?<![\w#])" + re.escape(info) + r"(?!\w)"
    return re.search(pattern, text, re.IGNORECASE) is not None


STATUSES = ("pending", "processed", "delivered", "cancelled")
# an amount stated as the refund: "refund 130", "refund of $130", "130 will be refunded"
_REFUND = re.compile(
    r"refund(?:ed)?(?: of)?\s+\$?(\d+)\b|\$?\b(\d+)\s+(?:will be |is |has been )?refunded",
    re.IGNORECASE,
)


def contradicts(text: str, info: str) -> bool:
    """Whether ``text`` also states a rival of ``info``: another order status for a status,
    another refund amount for an amount (other numbers, "5 business days", are not rivals).
    Without it an agent that names every status in turn, or a wrong refund and then the right
    one, would count as having told the user."""
    if info.lower() in STATUSES:
        return any(mentions(text, s) for s in STATUSES if s != info.lower())
    if info.isdigit():
        return any((a or b) != info for a, b in _REFUND.findall(text))
    return False


_AFFIRM = re.compile(r"\b(yes|yeah|yep)\b|go ahead|please do", re.IGNORECASE)


def affirms(user_text: str) -> bool:
    """Whether a user message is an explicit yes (policy rule 2)."""
    return bool(_AFFIRM.search(user_text)) and not re.match(r"\s*no\b", user_text, re.I)
