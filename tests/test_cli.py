"""The command line: train, eval (pass@k, pass^k, baselines), report, envs, config errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.test_train import BANDIT
from turnrl.cli import app

runner = CliRunner()


def test_envs_lists_families_and_recipes():
    out = runner.invoke(app, ["envs"])
    assert out.exit_code == 0
    for name in ("code", "tools", "user", "web", "computer", "code-tiny", "tools-tiny", "web-tiny"):
        assert name in out.output


def test_bad_config_exits_2_before_work(tmp_path):
    out = runner.invoke(app, ["train", "steps=-3", "algo.advantage=magic", f"runs_dir={tmp_path}"])
    assert out.exit_code == 2
    assert "steps" in out.output and "algo.advantage" in out.output
    assert not any(tmp_path.iterdir())


def test_help_everywhere():
    for cmd in ([], ["train"], ["eval"], ["report"], ["envs"], ["audit"], ["doctor"]):
        out = runner.invoke(app, [*cmd, "--help"])
        assert out.exit_code == 0 and "Usage" in out.output


@pytest.mark.slow
def test_train_eval_report(tmp_path, monkeypatch):
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path / "cache"))
    out = runner.invoke(app, ["train", "--quiet", *BANDIT, "steps=1", f"runs_dir={tmp_path}"])
    assert out.exit_code == 0, out.output
    run_dir = tmp_path / "bandit"
    result = tmp_path / "eval.json"
    # by default the run's own held-out tasks and sampling seed: the same episodes, the same score
    out = runner.invoke(app, ["eval", str(run_dir), "--no-baselines", "--out", str(result)])
    assert out.exit_code == 0, out.output
    in_run = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    final = [m for m in in_run if "eval/success" in m][-1]
    res = json.loads(result.read_text())
    assert res["tasks"] == 48 and res["episodes"] == final["eval/episodes"] == 48
    # equal here; batching may shift one episode by float noise
    assert res["success"] == pytest.approx(final["eval/success"], abs=1 / 48)
    greedy = ["eval", str(run_dir), "rollout.eval_temperature=0", "--k", "2", "--tasks", "6"]
    out = runner.invoke(app, greedy)
    assert out.exit_code == 2 and "rollout.eval_temperature" in out.output  # k equal tries
    out = runner.invoke(
        app, ["eval", str(run_dir), "--k", "2", "--tasks", "6", "--out", str(result)]
    )
    assert out.exit_code == 0, out.output
    res = json.loads(result.read_text())
    assert res["episodes"] == 12 and res["k"] == 2
    assert res["pass^2"] <= res["success"] <= res["pass@2"]
    assert res["baseline/do_nothing"] == 0.0
    (run_dir / "report.html").unlink()
    out = runner.invoke(app, ["report", str(run_dir)])
    assert out.exit_code == 0 and (run_dir / "report.html").exists()
