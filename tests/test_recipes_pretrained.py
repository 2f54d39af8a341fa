"""The SmolLM2 recipes have a training signal: one RL step of ``turnrl train recipe=NAME`` with
the recipe's own model, env, template, sampling, group size and reward, after a warm start cut
to a few demonstrations, gives some episodes of a group a different reward than others, so some
advantages are not 0. (The recipes' figures come from benchmarks/recipes.py, not from here.)"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from turnrl.cli import app

# one step on two tasks, one held-out episode, the warm start cut to 8 steps (its learning
# rate raised to match): on the tools env 32 demonstrations seen twice teach the call format
# and some tasks (16 taught the format only); a guessing game needs the format alone (a lost
# game scores partial credit), which 8 games seen twice teach
SHORT = ["steps=1", "rollout.tasks_per_step=2", "env.eval_tasks=1", "sft.epochs=2", "sft.lr=3e-4"]
WARM_START = {
    "smollm2-tools": ["sft.episodes=32", "sft.batch_size=8"],
    "smollm2-guess": ["sft.episodes=8", "sft.batch_size=2"],
}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(WARM_START))
def test_one_rl_step_of_the_recipe_has_a_training_signal(recipe, tmp_path):
    if recipe == "smollm2-guess":
        pytest.importorskip("textarena", reason="the textarena extra")
    args = ["train", "--quiet", f"recipe={recipe}", *SHORT, *WARM_START[recipe]]
    out = CliRunner().invoke(app, [*args, f"runs_dir={tmp_path}", "name=r"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(x) for x in (tmp_path / "r/metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "adv/abs_mean" in r)
    assert step["train/no_signal"] == 0.0
    assert step["adv/abs_mean"] > 0
