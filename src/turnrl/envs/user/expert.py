"""The scripted support agent: follows the policy step by step for a generated task.

It asks for one detail at a time, authenticates before looking anything up, describes each
change and waits for a yes, refunds only to the original payment method, tells the user the
outcome, and refuses what the policy forbids. The plan is fixed from the task payload but only
uses what the conversation and tool outputs reveal, so it is a demonstration a model can learn.
"""

from __future__ import annotations

from typing import Any

from turnrl.types import ToolCall


def _say(text: str) -> ToolCall:
    return ToolCall("send_message", {"text": text})


def expert_plan(payload: dict[str, Any]) -> list[ToolCall]:
    u, sol, init = payload["user"], payload["solution"], payload["init"]
    facts, target = u["facts"], u["target"]
    order = next(o for o in init["orders"] if o["order_id"] == target)
    items = [i for i in init["items"] if i["order_id"] == target]
    method = order["payment_method"]
    plan = [
        _say("Could you tell me your email address?"),
        ToolCall("find_user", {"email": facts["email"]}),
        _say("What is the order id?"),
    ]
    if u.get("order_hint"):  # search the user's orders for the one described
        plan.append(ToolCall("list_orders", {"user_id": sol["user_id"]}))
        for oid in sorted(sol["my_orders"]):
            plan.append(ToolCall("get_order", {"order_id": oid}))
            if oid == target:
                break
    else:
        plan.append(ToolCall("get_order", {"order_id": target}))
    confirm = "Shall I proceed (yes/no)?"
    kind = sol["kind"]
    if kind == "status":
        # in get_order's words (status=...): what follows "status=" is copied by induction
        plan.append(_say(f"Your order {target} status={order['status']}."))
    elif kind == "refuse":
        plan.append(
            _say(
                f"Order {target} is already processed, so our policy does not allow cancelling it."
            )
        )
    elif kind == "cancel":
        reason = facts["reason"]
        amount = sum(i["price"] for i in items if i["status"] == "ordered")
        plan += [
            _say(
                "What is the reason for the cancellation: no longer needed or ordered by mistake?"
            ),
            _say(
                f"I will cancel order {target} ({reason}); the money goes back to the "
                f"original payment method. {confirm}"
            ),
            ToolCall("cancel_order", {"order_id": target, "reason": reason}),
            # the amount is told in the words the tool reported it in, a copy, not a sum
            _say(f"Done: order {target} cancelled, refund {amount} to {method}."),
        ]
    elif kind == "address":
        new = facts["address"]
        plan += [
            _say("What is the new shipping address?"),
            _say(f"I will change the shipping address of order {target} to {new}. {confirm}"),
            ToolCall("change_address", {"order_id": target, "address": new}),
            _say(f"Done: order {target} will ship to {new}."),
        ]
    elif kind == "return":
        item = facts["item"]
        price = next(i["price"] for i in items if i["item"] == item)
        plan += [
            _say("Which item would you like to return?"),
            _say(
                f"I will return the {item} from order {target} and refund {price} to {method}, "
                f"the original payment method (refunds can only go there). {confirm}"
            ),
            ToolCall("return_item", {"order_id": target, "item": item, "refund_method": method}),
            _say(f"The {item} is returned and {price} will be refunded to {method}."),
        ]
    elif kind == "exchange":
        item, variant = facts["item"], facts["variant"]
        plan += [
            _say("Which item would you like to exchange?"),
            _say("Which variant would you like instead?"),
            _say(f"I will exchange the {item} in order {target} for the {variant} one. {confirm}"),
            ToolCall("exchange_item", {"order_id": target, "item": item, "new_variant": variant}),
            _say(f"Done: the {item} will be exchanged for the {variant} one."),
        ]
    else:
        raise ValueError(f"user env: unknown solution kind {kind!r}")
    return plan
