"""Tier 0 of the code env: generated one-function tasks, and the expert's one-word edits."""

from turnrl.envs.code.expert import CodeExpert, narrow
from turnrl.envs.code.micro import MODULE_NAMES, micro_task, micro_tasks
from turnrl.envs.code.pytest_results import run_pytest
from turnrl.envs.code.tasks import materialize


def test_micro_tasks_are_deterministic_and_hold_out_function_names():
    assert micro_task(7, "train") == micro_task(7, "train")
    train, test = micro_tasks("train"), micro_tasks("test")
    assert len({t.id for t in train + test}) == len(train) + len(test)
    fn = lambda t: t.payload["mutations"][0]["function"]  # noqa: E731
    assert not {fn(t) for t in train} & {fn(t) for t in test}
    # The modules (the repository's files) are shared; the functions are what is new.
    assert {t.payload["module"] for t in test} <= set(MODULE_NAMES)


def test_micro_task_states_its_intent_and_has_one_wrong_operator():
    p = micro_task(0, "train").payload
    ((path, buggy),) = p["repo"].items()
    fixed = p["gold_patch"][path]
    assert '"""Return ' in buggy and buggy.count("\n") == 3
    diff = [(a, b) for a, b in zip(buggy.splitlines(), fixed.splitlines()) if a != b]
    assert len(diff) == 1 and diff[0][0].strip().startswith("return")


def test_micro_tasks_fail_before_and_pass_after_the_gold_fix(tmp_path):
    """Expectations are computed, not run, when a task is generated: check them with pytest on
    one task per module (a shared module name would clash in one pytest run)."""
    by_module = {}
    for t in micro_tasks("train")[:200] + micro_tasks("test")[:100]:
        by_module.setdefault(t.payload["module"], t)
    sample = list(by_module.values())
    assert len(sample) == len(MODULE_NAMES)
    for fixed in (False, True):
        root = tmp_path / ("gold" if fixed else "buggy")
        for task in sample:
            materialize(task, root / task.payload["module"], hidden=True)
            if fixed:
                for rel, content in task.payload["gold_patch"].items():
                    (root / task.payload["module"] / rel).write_text(content)
        outcomes = run_pytest(root, timeout=120)
        for task in sample:
            p, d = task.payload, task.payload["module"]
            failing = [] if fixed else p["fail_to_pass"]
            for test_id in p["fail_to_pass"] + p["pass_to_pass"]:
                want = ("failed",) if test_id in failing else ("passed",)
                assert outcomes.get(f"{d}/{test_id}") in want, (task.id, test_id, fixed)


def test_narrow_keeps_only_the_changed_words_with_their_space():
    text = 'def f(a, b):\n    """Return a plus b."""\n    return a - b\n'
    assert narrow("return a - b", "return a + b", text) == (" -", " +")
    # "and" also occurs in the docstring: widened until unique.
    text = 'def f(a, b):\n    """Return a and b."""\n    return a or b\n'
    assert narrow("return a or b", "return a and b", text) == (" or", " and")
    text2 = 'def f(a, b):\n    """Check a and b."""\n    return a and b\n'
    assert narrow("return a and b", "return a or b", text2) == ("return a and", "return a or")
    assert narrow("x <= 3", "x < 3", "y = x <= 3\nz = 1\n") == (" <=", " <")
    # Several lines change: returned whole.
    assert narrow("a\nb", "a\nc", "a\nb\n") == ("a\nb", "a\nc")


def test_expert_edits_micro_tasks_with_one_word():
    task = micro_task(3, "test")
    calls = CodeExpert(task).plan
    (edit,) = [c for c in calls if c.name == "edit_file"]
    buggy = task.payload["repo"][edit.arguments["path"]]
    assert buggy.count(edit.arguments["old"]) == 1 and len(edit.arguments["old"].split()) <= 3
    fixed = buggy.replace(edit.arguments["old"], edit.arguments["new"])
    assert fixed == task.payload["gold_patch"][edit.arguments["path"]]
    noisy = [CodeExpert(micro_task(i, "train"), noise=0.5).plan for i in range(20)]
    assert any(len(p) != len(calls) for p in noisy)  # mistakes happen, in the demonstrations too


def test_a_copied_operator_is_the_same_token_in_the_code_and_in_the_call():
    from turnrl.chat import HermesToolCallParser
    from turnrl.envs.code.env import CodeEnv
    from turnrl.tiny.model import tool_call_tokens, train_tokenizer
    from turnrl.types import ToolCall

    tasks = micro_tasks("train")[:200]
    call = ToolCall("edit_file", {"path": "stats.py", "old": " -", "new": " +"})
    text = HermesToolCallParser().format([call])
    sources = [src for t in tasks for src in t.payload["repo"].values()]
    tools = CodeEnv().tool_schemas()
    tok = train_tokenizer(
        sources + [text] * 20, vocab_size=400, extra_tokens=tool_call_tokens(tools)
    )
    ids = tok(text).input_ids
    minus, plus = tok(" -").input_ids, tok(" +").input_ids
    assert len(minus) == len(plus) == 1 and minus[0] in ids and plus[0] in ids
    assert minus[0] in tok("    return a - b").input_ids
    assert tok("stats").input_ids[0] in tok("Files:\nstats.py").input_ids
    assert tok('","old":"').input_ids[0] in ids  # the frame is one token
