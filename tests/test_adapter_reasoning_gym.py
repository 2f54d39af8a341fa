"""reasoning-gym datasets through the real agent loop (``env.name=reasoning_gym``): answers by
tool call and by plain text, several attempts, the dataset's own score as the reward,
reproducible splits, ``turnrl doctor`` and one ``turnrl train`` step."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

rg = pytest.importorskip("reasoning_gym", reason="the reasoning-gym extra")

from tests.adapters_support import check_token_exact, play_forced, train_one_step  # noqa: E402
from turnrl.cli import app  # noqa: E402
from turnrl.envs.adapters.reasoning_gym import ReasoningGymFamily  # noqa: E402
from turnrl.envs.registry import make_family  # noqa: E402
from turnrl.run.config import ConfigError, load_config  # noqa: E402
from turnrl.run.preflight import preflight  # noqa: E402
from turnrl.types import TerminationReason, ToolCall  # noqa: E402


def library_entry(task):
    """The row rebuilt through reasoning-gym's own API, and its scorer."""
    p = task.payload
    data = rg.create_dataset(p["dataset"], seed=p["seed"], size=p["size"], **p["config"])
    return data[p["index"]], data.score_answer


class WrongThenRight:
    """A wrong plain-text answer in tags, then the right one through the submit tool."""

    def __init__(self, answer: str) -> None:
        self.replies = iter(
            ["<answer>not a number</answer>", ToolCall("submit", {"answer": answer})]
        )

    def act(self, observation):
        return next(self.replies)


def test_multi_turn_answers_are_token_exact_and_scored_by_the_dataset():
    family = make_family("reasoning_gym", {"dataset": "basic_arithmetic", "attempts": 3})
    tasks = family.tasks("test", 3, seed=0)
    answers = [library_entry(t)[0]["answer"] for t in tasks]
    trajs, backend, renderer = play_forced(
        family.make_env, tasks, [WrongThenRight(a) for a in answers]
    )
    tools = family.make_env().tool_schemas()
    for i, traj in enumerate(trajs):
        entry, score = library_entry(tasks[i])
        assert traj.messages[1]["content"] == entry["question"]
        assert traj.termination is TerminationReason.DONE, traj.error
        assert len(traj.turns) == 2
        check_token_exact(traj, renderer, tools, backend.generations[i])
        assert (
            "Incorrect (score 0.00). Try again: 2 attempt(s) left." in traj.messages[3]["content"]
        )
        assert traj.reward == score(answers[i], entry) == 1.0
        assert traj.graded.components == {"score": 1.0, "answers": 2.0}


def test_one_attempt_ends_on_the_first_answer_with_its_partial_score():
    family = ReasoningGymFamily("basic_arithmetic")
    task = family.tasks("train", 1, seed=4)[0]
    entry, score = library_entry(task)
    reply = f"<answer>{entry['answer']} or so</answer>"  # the oracle inside a longer answer

    class Once:
        def act(self, observation):
            return reply

    trajs, backend, renderer = play_forced(family.make_env, [task], [Once()])
    traj = trajs[0]
    check_token_exact(traj, renderer, family.make_env().tool_schemas(), backend.generations[0])
    expected = score(f"{entry['answer']} or so", entry)
    assert traj.termination is TerminationReason.DONE and len(traj.turns) == 1
    assert traj.reward == pytest.approx(expected) and not traj.graded.success


def test_splits_are_reproducible_and_disjoint_by_question():
    family = ReasoningGymFamily("chain_sum")
    train, test = family.tasks("train", 50, seed=2), family.tasks("test", 12, seed=2)
    assert train == family.tasks("train", 50, seed=2) and len(test) == 12
    questions = {library_entry(t)[0]["question"] for t in train}
    assert not questions & {library_entry(t)[0]["question"] for t in test}
    assert family.tasks("train", 3, seed=3) != family.tasks("train", 3, seed=2)


def test_config_reaches_the_generator_and_bad_options_fail_in_one_line(tmp_path):
    family = ReasoningGymFamily("basic_arithmetic", config={"min_terms": 2, "max_terms": 2})
    task = family.tasks("train", 1)[0]
    assert library_entry(task)[0]["metadata"]["num_terms"] == 2
    base = [f"runs_dir={tmp_path}", "env.name=reasoning_gym", "sft.enabled=false"]
    for options, field in [
        ("{dataset: no_such_set}", "env.options.dataset"),
        ("{dataset: chain_sum, config: {colour: red}}", "env.options.config"),
        ("{dataset: chain_sum, config: {seed: 3}}", "env.options.config"),
        ("{dataset: chain_sum, attempts: 0}", "env.options.attempts"),
    ]:
        cfg = load_config(None, [*base, f"env.options={options}"])
        with pytest.raises(ConfigError, match=field) as e:
            preflight(cfg)
        assert "\n" not in str(e.value)
    assert not any(tmp_path.iterdir())


def test_missing_package_names_the_extra(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    cfg = load_config(
        None, [f"runs_dir={tmp_path}", "env.name=reasoning_gym", "env.options.dataset=x"]
    )
    with pytest.raises(ConfigError, match=r"pip install 'turnrl\[reasoning-gym\]'"):
        preflight(cfg)


def test_doctor_passes():
    out = CliRunner().invoke(
        app,
        [
            "doctor",
            "reasoning_gym",
            "env.options={dataset: chain_sum, attempts: 2}",
            "--tasks",
            "3",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "all checks passed" in out.output


def test_one_training_step_through_turnrl_train(tmp_path):
    rows = train_one_step(tmp_path, ["env.name=reasoning_gym", "env.options.dataset=chain_sum"])
    assert [r["step"] for r in rows if "loss" in r] == [1]
