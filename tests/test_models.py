"""Model placement options: ``model.dtype``, ``model.device``, ``model.trust_remote_code``."""

from __future__ import annotations

import json

import pytest
import torch

from turnrl.policy.models import load_model, place, resolve_device, resolve_dtype
from turnrl.run.config import ConfigError, load_config
from turnrl.run.preflight import checked_config


def test_auto_is_cuda_bf16_with_a_gpu_and_cpu_fp32_without():
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where no GPU exists")
def test_cuda_without_a_gpu_is_a_config_error():
    load_config(None, ["model.device=cuda"])  # a value: a saved config loads anywhere
    with pytest.raises(ConfigError, match="model.device: cuda asked for, but no CUDA"):
        checked_config(None, ["model.device=cuda"])
    with pytest.raises(ConfigError, match="model.dtype"):
        load_config(None, ["model.dtype=fp8"])


def test_place_moves_to_dtype():
    m = place(torch.nn.Linear(2, 2), "cpu", "bfloat16")
    assert m.weight.dtype == torch.bfloat16 and m.weight.device.type == "cpu"


def _custom_code_model(path):
    """A model directory whose architecture lives in its own Python file (``auto_map``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    path.mkdir()
    (path / "modeling_house.py").write_text(
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "class HouseConfig(LlamaConfig):\n    model_type = 'house'\n"
        "class HouseForCausalLM(LlamaForCausalLM):\n    config_class = HouseConfig\n"
    )
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    data = json.loads((path / "config.json").read_text())
    data.update(
        model_type="house",
        architectures=["HouseForCausalLM"],
        auto_map={
            "AutoConfig": "modeling_house.HouseConfig",
            "AutoModelForCausalLM": "modeling_house.HouseForCausalLM",
        },
    )
    (path / "config.json").write_text(json.dumps(data))


def test_trust_remote_code_loads_a_custom_architecture(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "hf" / "modules"))
    _custom_code_model(tmp_path / "house")
    with pytest.raises(ValueError, match="trust_remote_code"):
        load_model(tmp_path / "house")
    model = load_model(tmp_path / "house", "bfloat16", "cpu", trust_remote_code=True)
    assert type(model).__name__ == "HouseForCausalLM"
    assert next(model.parameters()).dtype == torch.bfloat16


def test_bf16_on_cpu_trains_and_saves_bf16(tmp_path, monkeypatch):
    from turnrl.run.recipe import train
    from turnrl.train.metrics import read_jsonl

    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path / "cache"))
    cfg = load_config(
        None,
        [
            f"runs_dir={tmp_path}",
            "model.dtype=bfloat16",
            "model.name=tiny",
            "env.name=guess",
            "env.options={low: 1, high: 8, secret: 5}",
            "env.eval_tasks=2",
            "steps=1",
            "rollout.tasks_per_step=2",
            "rollout.group_size=2",
            "rollout.max_turns=1",
            "rollout.max_new_tokens=16",
            "rollout.max_context_tokens=512",
            "algo.entropy_coef=0.01",
            "optim.minibatch_size=4",
            "optim.micro_batch_size=4",
            "sft.enabled=true",
            "sft.episodes=16",
            "sft.epochs=1",
            "tiny.vocab_size=320",
            "tiny.hidden_size=32",
            "tiny.layers=1",
            "threads=1",
        ],
    )
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    (step,) = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "policy_version" in r]
    assert torch.isfinite(torch.tensor(step["loss"]))
    assert json.loads((run_dir / "model" / "turnrl.json").read_text())["dtype"] == "bfloat16"
