"""benchmarks/peer_trl.py: the TRL side's env wrapper, dataset rows and prompt tokens (these
need no TRL), TRL's parser on turnrl's tool calls, and the quick run end to end. The last two
need TRL, the benchmark's optional extra (``pip install -e .[peer]``): they skip without it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chat_families import random_model
from turnrl.chat import check_template
from turnrl.envs.tools.expert import solution_calls
from turnrl.policy.models import load_tokenizer
from turnrl.rollout.source import sample_requests
from turnrl.run.preflight import env_tasks
from turnrl.types import Task

REPO = Path(__file__).resolve().parents[1]
SETTINGS = [
    "model.name=smollm2",
    "env.name=tools",
    "env.options.tiers=[easy]",
    "steps=3",
    "rollout.tasks_per_step=2",
    "rollout.group_size=2",
    "optim.minibatch_size=4",
    "optim.micro_batch_size=2",
]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("peer_trl", REPO / "benchmarks" / "peer_trl.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["peer_trl"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setup(bench):
    cfg = bench.benchmark_config(None, None, SETTINGS, quick=False)
    family, train_tasks, _ = env_tasks(cfg)
    renderer = check_template(load_tokenizer("smollm2"), source="smollm2")
    return cfg, family, train_tasks, renderer, bench.build_rows(cfg, family, train_tasks, renderer)


def start(row: dict, env_cls):
    env = env_cls()
    env.reset(**{k: v for k, v in row.items() if k != "environment"})
    return env


def test_rows_are_turnrls_tasks_in_turnrls_order(setup):
    cfg, _, train_tasks, _, rows = setup
    r = cfg.rollout
    want = [
        req.task.id
        for step in range(cfg.steps)
        for req in sample_requests(train_tasks, step, cfg.seed, r.tasks_per_step, r.group_size)[
            :: r.group_size
        ]
    ]
    assert [Task.from_json(r["task"]).id for r in rows.rows] == want
    assert len(want) == cfg.steps * cfg.rollout.tasks_per_step
    assert {r["environment"] for r in rows.rows} <= set(rows.classes)


def test_the_tool_template_renders_turnrls_prompt_tokens(bench, setup):
    *_, renderer, rows = setup
    tok = load_tokenizer("smollm2")
    tok.chat_template = bench.CHATML_TOOLS_TEMPLATE
    bench.check_same_tokens(tok, renderer, rows)  # raises on the first difference
    # a tool result after an assistant turn: the delta turnrl appends after the turn end
    prefix = [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "tool_calls": [_call("done", {})]},
    ]
    tool = [{"role": "tool", "name": "done", "content": "Episode finished."}]
    before = tok.apply_chat_template(prefix, tokenize=False)
    after = tok.apply_chat_template(prefix + tool, tokenize=False, add_generation_prompt=True)
    assert after.startswith(before)
    delta = after[len(before.rsplit("<|im_end|>", 1)[0]) + len("<|im_end|>") :]
    assert delta == renderer.observation_delta([{"role": "tool", "content": "Episode finished."}])
    # a template that drops tool calls would be refused by TRL (supports_tool_calling)
    assert '"name": "done"' in before and "Episode finished." in after


def _call(name: str, arguments: dict) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def test_the_wrapper_plays_an_expert_episode_through_the_env(setup):
    _, _, _, _, rows = setup
    row = rows.rows[0]
    env = start(row, rows.classes[row["environment"]])
    task = Task.from_json(row["task"])
    for call in solution_calls(task.payload):
        assert not getattr(env, call.name)(**call.arguments).startswith("Error")
    assert env.done() == "Episode finished."
    with pytest.raises(ValueError, match="episode has ended"):
        env.done()  # no call reaches the env after it ended the episode
    assert env.get_reward() == 1.0


def test_an_episode_the_env_did_not_end_scores_zero_under_truncation_zero(setup):
    _, _, _, _, rows = setup
    row = rows.rows[0]
    cls = rows.classes[row["environment"]]
    for zero, want in ((True, 0.0), (False, 1.0)):
        env = start(row, cls)
        env.zero_truncated = zero
        for call in solution_calls(Task.from_json(row["task"]).payload):
            getattr(env, call.name)(**call.arguments)
        assert env.get_reward() == want  # the right state, but done() never called
        assert env.graded.success


def test_tool_methods_carry_schemas_and_the_env_checks_arguments(setup):
    from transformers.utils import get_json_schema

    _, _, _, _, rows = setup
    for key, cls in rows.classes.items():
        row = next(r for r in rows.rows if r["environment"] == key)
        env = start(row, cls)
        names = {get_json_schema(getattr(env, n))["function"]["name"] for n in env._env.tools}
        assert names == set(env._env.tools)
        public = {n for n in vars(cls) if not n.startswith("_") and callable(vars(cls)[n])}
        assert public == set(env._env.tools)  # TRL shows every public method as a tool
    files = next(r for r in rows.rows if "write_file" in vars(rows.classes[r["environment"]]))
    env = start(files, rows.classes[files["environment"]])
    out = env.write_file(path="a.txt")  # content missing: the env's own error text
    assert out.startswith("Error: bad arguments for 'write_file'") and "content" in out


def test_unsupported_settings_are_named(bench):
    from turnrl.run.config import ConfigError

    with pytest.raises(ConfigError) as e:
        bench.benchmark_config(
            None, None, [*SETTINGS, "algo.advantage=gigpo", "optim.minibatch_size=3"], False
        )
    assert "algo.advantage=gigpo" in str(e.value) and "optim.minibatch_size=3" in str(e.value)


def test_trls_parser_reads_turnrls_tool_calls(bench, setup):
    pytest.importorskip(
        "trl", reason="TRL is the benchmark's optional extra: pip install -e .[peer]"
    )
    from trl.chat_template_utils import parse_response

    *_, renderer, rows = setup
    tok = bench.trl_tokenizer("smollm2", renderer)
    action = renderer.parser.format([_tool("read_file", {"path": "notes/a.txt"})])
    ids = tok(action + "<|im_end|>", add_special_tokens=False)["input_ids"]
    parsed = parse_response(tok, ids, prefix=rows.prompt_ids[0])
    assert parsed["tool_calls"] == [_call("read_file", {"path": "notes/a.txt"})]


def _tool(name: str, arguments: dict):
    from turnrl.types import ToolCall

    return ToolCall(name, arguments)


@pytest.mark.slow
def test_quick_run_end_to_end(tmp_path):
    pytest.importorskip(
        "trl", reason="TRL is the benchmark's optional extra: pip install -e .[peer]"
    )
    # SmolLM2's tokenizer and chat template on a random-weight model of tiny width: the same
    # tokens, prompts and tool-call format as the recipe, at a smoke test's cost
    tok = load_tokenizer("smollm2")
    model_dir = tmp_path / "smol-shaped"
    random_model(tok, "llama3").save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    config = tmp_path / "smol-tools.yaml"
    config.write_text(
        f"model: {{name: {model_dir}}}\n"
        "env: {name: tools, options: {tiers: [easy]}}\n"
        "sft: {enabled: true, lr: 5.0e-5}\n"
        "threads: 1\n"
    )
    out = tmp_path / "out"
    cmd = [sys.executable, str(REPO / "benchmarks" / "peer_trl.py"), "--quick"]
    proc = subprocess.run(
        [*cmd, "--config", str(config), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "peer_trl.json").read_text())
    for side in ("turnrl", "trl"):
        points = sorted((p for p in result["points"] if p["side"] == side), key=lambda p: p["step"])
        assert [p["step"] for p in points] == [0, 1, 2]
        assert points[0]["train_s"] == 0 < points[1]["train_s"] < points[2]["train_s"]
        assert all(0.0 <= p["success"] <= 1.0 and p["episodes"] == 2 for p in points)
    s = result["summary"]
    assert s["ratio"] is None or s["ratio"] >= 0
    assert (out / "peer_trl.png").stat().st_size > 0 and (out / "peer_trl.md").exists()
    # the step-0 checkpoint is the same start on both sides, scored by the same evaluator
    assert (
        "turnrl reaches" in (out / "peer_trl.md").read_text()
        or "ratio: none" in (out / "peer_trl.md").read_text()
    )
    # one side rerun alone keeps the other side's finished figures (same config and start)
    proc = subprocess.run(
        [*cmd, "--config", str(config), "--out", str(out), "--sides", "turnrl"],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "trl: the finished side" in proc.stdout + proc.stderr
    again = json.loads((out / "peer_trl.json").read_text())
    trl_points = [p for p in result["points"] if p["side"] == "trl"]
    assert [p for p in again["points"] if p["side"] == "trl"] == trl_points
    assert sorted(p["step"] for p in again["points"] if p["side"] == "turnrl") == [0, 1, 2]
    assert "summary" in again


def test_a_side_is_reused_only_from_the_same_config_and_start(bench, tmp_path):
    cfg = bench.benchmark_config(None, None, SETTINGS, quick=False)
    points = [
        {
            "side": "trl",
            "step": s,
            "train_s": 10.0 * s,
            "success": 0.5,
            "success_stderr": 0.1,
            "episodes": 2,
        }
        for s in (0, 1, 3)
    ]
    saved = {"start": "START", "config": cfg.model_dump(mode="json"), "points": points}
    (tmp_path / "peer_trl.json").write_text(json.dumps(saved))
    assert [p.step for p in bench.earlier_points(tmp_path, cfg, "START", "trl")] == [0, 1, 3]
    assert bench.earlier_points(tmp_path, cfg, "START", "turnrl") == []  # that side never ran
    assert bench.earlier_points(tmp_path, cfg, "OTHER", "trl") == []
    other = bench.benchmark_config(None, None, [*SETTINGS, "optim.lr=1e-4"], quick=False)
    assert bench.earlier_points(tmp_path, other, "START", "trl") == []
    saved["points"] = points[:2]  # stopped before its last step
    (tmp_path / "peer_trl.json").write_text(json.dumps(saved))
    assert bench.earlier_points(tmp_path, cfg, "START", "trl") == []
