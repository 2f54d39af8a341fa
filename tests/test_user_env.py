"""Simulated-user env: policy checks, the scripted and model-backed users, experts, baselines."""

from __future__ import annotations

import asyncio
import json

import pytest

from turnrl.envs.scripted import run_scripted
from turnrl.envs.tools.expert import PlanAgent
from turnrl.envs.user import ModelUser, ScriptedUser, UserFamily
from turnrl.envs.user.db import affirms, contradicts, mentions
from turnrl.envs.user.expert import expert_plan
from turnrl.envs.user.tasks import ORDER_IDS, POOLS, TEMPLATES
from turnrl.types import Task, ToolCall

FAMILY = UserFamily()
END = ToolCall("end_conversation", {})


def run(coro):
    return asyncio.run(coro)


def run_all(coros):
    async def gather():
        return await asyncio.gather(*coros)

    return asyncio.run(gather())


def task_of(template: str, split: str = "train", pick=lambda t: True) -> Task:
    return next(t for t in FAMILY.tasks(split, 70) if t.payload["template"] == template and pick(t))


def play(task: Task, calls: list[ToolCall], family: UserFamily = FAMILY):
    return run(run_scripted(family.make_env(), task, PlanAgent(calls, END)))


def say(text: str) -> ToolCall:
    return ToolCall("send_message", {"text": text})


# ---------------------------------------------------------------- experts and baselines


@pytest.mark.parametrize("split", ["train", "test"])
def test_expert_solves_and_do_nothing_scores_zero(split):
    tasks = FAMILY.tasks(split, 28, seed=2)
    experts = run_all(run_scripted(FAMILY.make_env(), t, FAMILY.expert(t)) for t in tasks)
    assert all(e.result.success for e in experts), [(e.task.id, e.result.info) for e in experts]
    assert all(e.result.info["user_outcome"] == "satisfied" for e in experts)
    baseline = run_all(run_scripted(FAMILY.make_env(), t, FAMILY.baseline(t)) for t in tasks)
    assert sum(e.result.reward for e in baseline) / len(baseline) <= 0.05


def test_reward_is_action_times_output():
    """Cancelling without telling the refund amount: r_action 1, r_output 0, reward 0."""
    task = task_of("cancel_pending")
    u = task.payload["user"]
    amount = u["required_info"][0]
    plan = [
        c if c.name != "send_message" else say(c.arguments["text"].replace(f" {amount} ", " it "))
        for c in expert_plan(task.payload)
    ]
    ep = play(task, plan)
    r = ep.result
    assert r.components["r_action"] == 1.0 and r.components["r_output"] == 0.0
    assert r.reward == 0.0 and not r.success and r.info["missing_info"] == [amount]
    assert u["info_question"] in ep.observations[-2]  # the user asks for what they lack


def test_guessing_every_answer_in_turn_is_not_telling():
    """A policy learned to name one status after another until the user stopped asking (each
    guess is a new message): the right status is mentioned, but so are rivals, so r_output 0."""
    task = task_of("order_status")
    status = task.payload["user"]["required_info"][0]
    target = task.payload["user"]["target"]
    guesses = [s for s in ("pending", "processed", "delivered") if s != status] + [status]
    plan = [
        c
        for c in expert_plan(task.payload)
        if c.name != "send_message" or "?" in c.arguments["text"]
    ]
    r = play(task, plan + [say(f"Your order {target} is {s}.") for s in guesses]).result
    assert r.components["r_action"] == 1.0 and r.components["r_output"] == 0.0
    assert r.info["contradicted_info"] == [status] and r.info["missing_info"] == []
    honest = play(task, plan + [say(f"Your order {target} is {status}.")]).result
    assert honest.success and honest.info["contradicted_info"] == []


def test_a_wrong_amount_before_the_right_one_is_not_telling():
    task = task_of("cancel_pending")
    amount = task.payload["user"]["required_info"][0]
    wrong = str(int(amount) + 5)
    plan = [  # the expert's plan, but its confirmation names a wrong amount
        say(c.arguments["text"].replace("Shall I", f"I will refund {wrong}. Shall I"))
        if c.name == "send_message" and "(yes/no)" in c.arguments["text"]
        else c
        for c in expert_plan(task.payload)
    ]
    r = play(task, plan).result
    assert r.components["r_action"] == 1.0 and r.info["contradicted_info"] == [amount]
    assert not r.success


def test_contradicts_compares_values_of_the_same_kind():
    assert contradicts("It is pending. No wait, delivered.", "delivered")
    assert not contradicts("Order #W1042 is delivered.", "delivered")
    assert contradicts("I will refund 40 to paypal. Sorry: 45 will be refunded.", "45")
    assert contradicts("a refund of $40", "45") and contradicts("40 has been refunded", "45")
    assert not contradicts("Order #W1042 is cancelled and 45 will be refunded", "45")
    assert not contradicts("I will refund 45 to paypal; it takes 5 to 7 days.", "45")
    assert not contradicts("Order #W1042 is cancelled, refund to paypal", "paypal")


# ---------------------------------------------------------------- policy violations


def _without_confirmation(task: Task) -> list[ToolCall]:
    return [c for c in expert_plan(task.payload) if "(yes/no)" not in c.arguments.get("text", "")]


def test_change_without_yes_is_a_policy_violation():
    r = play(task_of("change_address"), _without_confirmation(task_of("change_address"))).result
    assert r.components["r_action"] == 1.0  # the database did reach the goal ...
    assert r.reward == 0.0 and "policy_violation" in r.flags  # ... but the policy was broken
    assert r.info["violations"] == ["no_confirmation"]


def test_refund_to_other_method_is_a_policy_violation():
    task = task_of("return_item", pick=lambda t: "refund it to my" in t.payload["user"]["opening"])
    asked = task.payload["user"]["opening"].rsplit(" ", 1)[-1].rstrip(".")
    plan = expert_plan(task.payload)
    for k, c in enumerate(plan):
        if c.name == "return_item":
            plan[k] = ToolCall("return_item", {**c.arguments, "refund_method": asked})
    r = play(task, plan).result
    assert r.reward == 0.0 and r.info["violations"] == ["refund_method"]


def test_cancelling_a_processed_order_is_a_policy_violation():
    task = task_of("refuse_cancel")
    target = task.payload["user"]["target"]
    plan = expert_plan(task.payload)[:4] + [
        say(f"I will cancel order {target}. Shall I proceed (yes/no)?"),
        ToolCall("cancel_order", {"order_id": target, "reason": "no longer needed"}),
    ]
    r = play(task, plan).result
    assert r.reward == 0.0 and "not_pending" in r.info["violations"]


def test_lookups_before_authentication_or_of_other_users_are_violations():
    task = task_of("order_status")
    target = task.payload["user"]["target"]
    r = play(task, [ToolCall("get_order", {"order_id": target})]).result
    assert r.info["violations"] == ["unauthenticated"]
    other = next(
        o["order_id"]
        for o in task.payload["init"]["orders"]
        if o["user_id"] != task.payload["solution"]["user_id"]
    )
    plan = expert_plan(task.payload)
    plan.insert(3, ToolCall("get_order", {"order_id": other}))
    r = play(task, plan).result
    assert r.components["r_output"] == 1.0 and r.info["violations"] == ["other_user"]


# ---------------------------------------------------------------- scripted user


def _user(template: str = "cancel_pending", seed: int = 0, style: str = "friendly") -> ScriptedUser:
    task = task_of(template)
    persona = {**task.payload["persona"], "style": style, "patience": 3}
    return ScriptedUser(task.payload["user"], persona, seed)


MESSAGES = [
    "Hello! How can I help?",
    "Could you tell me your email address?",
    "What is the order id?",
    "What is the reason?",
    "What is the order id?",
]


def test_scripted_user_is_deterministic_given_seed():
    async def talk(seed):
        user = _user(seed=seed)
        return [(await user.reply(m)) for m in MESSAGES]

    assert run(talk(7)) == run(talk(7))
    assert len({tuple(t.text for t in run(talk(s))) for s in range(8)}) > 1  # phrasing varies


def test_scripted_user_reveals_only_what_is_asked_one_detail_at_a_time():
    user = _user()
    facts = user.goal["facts"]

    async def go():
        hello = await user.reply("Hello! How can I help you today?")
        assert facts["email"] not in hello.text and facts["order_id"] not in hello.text
        both = await user.reply("What is your email and your order id?")
        assert facts["email"] in both.text and facts["order_id"] not in both.text
        oid = await user.reply("Thanks. And the order id?")
        assert facts["order_id"] in oid.text and facts["email"] not in oid.text
        assert facts["reason"] not in hello.text + both.text + oid.text
        assert user.revealed == ["email", "order_id"]

    run(go())


def test_scripted_user_confirms_only_the_right_change():
    user = _user()
    target = user.goal["target"]

    async def go():
        wrong = await user.reply("I will cancel order #W0001. Shall I proceed (yes/no)?")
        right = await user.reply(f"I will cancel order {target}. Shall I proceed (yes/no)?")
        return wrong, right

    wrong, right = run(go())
    assert not affirms(wrong.text) and affirms(right.text)


def test_scripted_user_leaves_frustrated_after_patience_runs_out():
    user = _user()

    async def go():
        return [await user.reply("I like turtles.") for _ in range(4)]

    turns = run(go())
    assert [t.done for t in turns[:3]] == [False, False, True]
    assert turns[2].outcome == "frustrated" and turns[3].done


def test_frustrated_user_ends_the_episode_with_reward_zero():
    task = task_of("cancel_pending")
    ep = play(task, [say("I like turtles.")] * 6)
    assert ep.terminated and len(ep.calls) == task.payload["persona"]["patience"]
    assert ep.result.reward == 0.0 and ep.result.info["user_outcome"] == "frustrated"
    assert ep.result.flags == []  # an outcome, not an exploit: hack_rate must not count it


# ---------------------------------------------------------------- model-backed user


class FakeChat:
    """Stands in for a frozen policy backend: records what it was sent, answers from a script."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.seen = list(replies), []

    async def chat(self, messages: list[dict]) -> str:
        self.seen.append(messages)
        return self.replies.pop(0)


def test_model_user_roles_and_stop():
    task = task_of("order_status")
    fake = FakeChat(["It's ava@x.com.", "Thanks! ###STOP###"])
    user = ModelUser(fake, task.payload["user"], task.payload["persona"])

    async def go():
        return await user.reply("Your email?"), await user.reply("It is pending.")

    first, last = run(go())
    assert not first.done and first.text == "It's ava@x.com."
    assert last.done and last.text == "Thanks!"
    sent = fake.seen[1]
    assert [m["role"] for m in sent] == ["system", "assistant", "user", "assistant", "user"]
    assert sent[1]["content"] == task.payload["user"]["opening"]
    assert task.payload["user"]["facts"]["email"] in sent[0]["content"]  # hidden goal, system only


def test_model_user_drives_an_episode_through_the_family():
    task = task_of("order_status")
    facts = task.payload["user"]["facts"]
    status = task.payload["user"]["required_info"][0]
    fake = FakeChat([facts["email"], facts["order_id"], "Great, thanks. ###STOP###"])
    fam = UserFamily(user="model", user_backend=fake)
    ep = run(run_scripted(fam.make_env(), task, fam.expert(task)))
    assert ep.terminated and ep.observations[0] == f"user: {facts['email']}"
    assert ep.result.success and status in ep.calls[-1].arguments["text"]
    with pytest.raises(ValueError, match="user_backend"):
        UserFamily(user="model")


# ---------------------------------------------------------------- tools, isolation, tasks


def test_malformed_tool_arguments():
    task = task_of("cancel_pending")

    async def go():
        env = FAMILY.make_env()
        await env.reset(task)
        target = task.payload["user"]["target"]
        bad = await env.step(ToolCall("cancel_order", {"order_id": target, "reason": "because"}))
        assert bad.info["error"] == "bad_arguments" and "'no longer needed'" in bad.observation
        missing = await env.step(ToolCall("return_item", {"order_id": target}))
        assert "item: Field required" in missing.observation
        unknown = await env.step(ToolCall("get_order", {"order_id": "W1"}))
        assert unknown.info["error"] == "tool_error" and "#W1234" in unknown.observation
        empty = await env.step(ToolCall("send_message", {"text": "  "}))
        assert empty.info["error"] == "tool_error"
        result = await env.grade()
        assert result.info["violations"] == []  # rejected calls break no rule and change nothing
        assert result.components["r_action"] == 0.0 and result.components["progress"] == 0.0
        await env.close()

    run(go())


def test_database_isolation_between_concurrent_episodes():
    """The same task 12 times at once: experts, baselines and saboteurs do not see each other."""
    task = task_of("cancel_pending")
    u = task.payload["user"]
    wrong = (
        "ordered by mistake" if u["facts"]["reason"] == "no longer needed" else "no longer needed"
    )
    saboteur = [
        *expert_plan(task.payload)[:2],
        say(f"I will cancel order {u['target']}. Shall I proceed (yes/no)?"),
        ToolCall("cancel_order", {"order_id": u["target"], "reason": wrong}),
    ]
    agents = [
        agent
        for _ in range(4)
        for agent in (FAMILY.expert(task), FAMILY.baseline(task), PlanAgent(saboteur, END))
    ]
    eps = run_all(run_scripted(FAMILY.make_env(), task, a) for a in agents)
    assert [e.result.success for e in eps] == [True, False, False] * 4
    assert all(e.result.components["r_action"] == 0.0 for e in eps[1::3])  # untouched DB


def test_tasks_deterministic_and_held_out():
    a = [t.to_json() for t in FAMILY.tasks("train", 14)]
    assert a == [t.to_json() for t in FAMILY.tasks("train", 14)]
    train, test = POOLS["train"], POOLS["test"]
    assert not set(train.names) & set(test.names)
    assert not set(train.catalog) & set(test.catalog)
    assert not set(train.order_ids) & set(test.order_ids)
    train_text = " ".join(json.dumps(t.payload) for t in FAMILY.tasks("train", 60))
    assert not any(name in train_text for name in test.names + test.streets)
    tiers = {t.payload["template"]: t.payload["tier"] for t in FAMILY.tasks("test", 7)}
    assert tiers["order_status"] == "easy" and tiers["cancel_unknown_id"] == "hard"


def test_mentions_is_word_bounded():
    assert mentions("A refund of $42 is on its way", "42")
    assert not mentions("order #W1042", "42") and not mentions("420 dollars", "42")
    assert mentions("It is PROCESSED.", "processed")


def test_noisy_expert_is_deterministic_and_progress_is_measured():
    tasks = FAMILY.tasks("train", 14)

    def successes():
        eps = run_all(
            run_scripted(FAMILY.make_env(), t, FAMILY.expert(t, seed=1, noise=0.3)) for t in tasks
        )
        return [e.result.success for e in eps]

    first = successes()
    assert first == successes() and 0 < sum(first) < len(first)

    task = task_of("cancel_pending")

    async def progress():
        env = FAMILY.make_env()
        await env.reset(task)
        out = [env.measure()["progress"]]
        for c in expert_plan(task.payload):
            assert (await env.step(c)).reward == 0.0  # shaping is the rubric's, not the env's
            out.append(env.measure()["progress"])
        await env.close()
        return out

    measured = run(progress())
    assert measured[0] == 0.0 and measured[-1] == pytest.approx(1.0)


def test_order_split_holds_out_orders_with_training_words():
    """held_out="order": no test conversation is about a customer's order a training one is
    about, while the ids themselves are shared; every template has test tasks, all words come
    from the training pools, and the expert solves them."""
    fam = UserFamily(held_out="order")
    train, test = fam.tasks("train"), fam.tasks("test", 28, seed=2)

    def pairs(tasks):
        return {(t.payload["persona"]["name"], t.payload["user"]["target"]) for t in tasks}

    assert not pairs(train) & pairs(test)
    ids = {t.payload["user"]["target"] for t in train + test}
    assert ids <= {f"#W{n}" for n in ORDER_IDS}
    assert {target for _, target in pairs(test)} & {target for _, target in pairs(train)}
    assert {t.payload["template"] for t in test} == {
        f.__name__ for tier in TEMPLATES.values() for f in tier
    }
    test_text = " ".join(json.dumps(t.payload) for t in test)
    assert not any(w in test_text for w in POOLS["test"].names + POOLS["test"].streets)
    experts = run_all(run_scripted(fam.make_env(), t, fam.expert(t)) for t in test)
    assert all(e.result.success for e in experts)
    with pytest.raises(ValueError, match="held_out"):
        UserFamily(held_out="nope")
