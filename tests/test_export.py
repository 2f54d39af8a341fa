"""``run_dir/model`` is the latest trained policy as a plain transformers directory: after a
real training run, ``AutoModelForCausalLM.from_pretrained`` on it gives the trained policy's
logits (full fine-tuning of the tiny model; a LoRA'd small random model, merged), ``turnrl
export`` copies it, and eval and resume use it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from turnrl.cli import app
from turnrl.run.config import load_config
from turnrl.run.recipe import train

GUESS = [
    "env.name=guess",
    "env.options={low: 1, high: 8, secret: 5}",
    "env.eval_tasks=2",
    "eval_every=0",
    "steps=2",
    "rollout.tasks_per_step=2",
    "rollout.group_size=2",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=16",
    "rollout.max_context_tokens=512",
    "algo.truncation=zero",
    # an entropy bonus trains every row, so the weights move even where all rewards tie
    "algo.entropy_coef=0.01",
    "optim.lr=0.01",
    "optim.minibatch_size=4",
    "optim.micro_batch_size=4",
    "threads=1",
]
TINY = [
    "model.name=tiny",
    "sft.enabled=true",
    "sft.episodes=16",
    "sft.epochs=1",
    "tiny.vocab_size=320",
    "tiny.hidden_size=32",
    "tiny.layers=1",
]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path / "cache"))


def earlier_keys(text: str) -> str:
    """A saved config.yaml as an earlier version wrote it: ``mode``, ``rollout.backend`` and
    the ``distributed`` section instead of ``max_staleness``, ``rollout.sampler``,
    ``rollout.workers`` and ``ray``."""
    data = yaml.safe_load(text)
    assert data["max_staleness"] == 0
    data["mode"], data["max_staleness"] = "sync", 1
    data["rollout"]["backend"] = data["rollout"].pop("sampler")
    data["distributed"] = {"backend": data["rollout"].pop("workers"), **data.pop("ray")}
    return yaml.safe_dump(data, sort_keys=False)


def logits_of(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.float()  # [1, T, V]


def test_tiny_run_exports_the_trained_policy(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    cfg = load_config(None, ["name=tiny", f"runs_dir={tmp_path / 'runs'}", *GUESS, *TINY])
    run_dir = train(cfg, quiet=True, log=lambda s: None)

    saved = AutoModelForCausalLM.from_pretrained(run_dir / "model")  # plain transformers
    tok = AutoTokenizer.from_pretrained(run_dir / "model")
    assert tok.chat_template
    ids = torch.tensor([tok("guess the number 5")["input_ids"]])

    # the trained policy, rebuilt independently: the warm start plus the last checkpoint
    (warm_dir,) = (tmp_path / "cache").glob("tiny-guess-*")
    trained = LlamaForCausalLM.from_pretrained(warm_dir)
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    trained.load_state_dict(state["model"], strict=False)  # tied lm_head is not stored
    warm = LlamaForCausalLM.from_pretrained(warm_dir)
    assert torch.allclose(logits_of(saved, ids), logits_of(trained, ids), atol=1e-5)
    assert (logits_of(saved, ids) - logits_of(warm, ids)).abs().max() > 1e-4  # it trained
    record = json.loads((run_dir / "model" / "turnrl.json").read_text())
    assert record["source"] == "tiny" and record["step"] == 2 and not record["lora_merged"]
    assert record["dtype"] == "float32"  # auto on the CPU: unchanged fp32

    # resume rebuilds the starting policy (the KL reference), the checkpoint goes on top
    from turnrl.envs.registry import make_family
    from turnrl.run.build import build_model

    family = make_family(cfg.env.name, cfg.env.options)
    start, _ = build_model(cfg, family, family.tasks("train", None), run_dir, log=lambda s: None)
    assert torch.equal(logits_of(start, ids), logits_of(warm, ids))

    # eval uses the saved policy even with the checkpoints gone
    from turnrl.run.evaluate import load_policy

    (run_dir / "checkpoints" / "last.pt").unlink()
    loaded, _ = load_policy(cfg, run_dir)
    assert torch.allclose(logits_of(loaded, ids), logits_of(trained, ids), atol=1e-5)

    # turnrl export RUN OUT: a copy anywhere; an existing OUT is refused, nothing written
    out = tmp_path / "exported"
    r = CliRunner().invoke(app, ["export", str(run_dir), str(out)])
    assert r.exit_code == 0, r.output
    again = AutoModelForCausalLM.from_pretrained(out)
    assert torch.allclose(logits_of(again, ids), logits_of(trained, ids), atol=1e-5)
    r = CliRunner().invoke(app, ["export", str(run_dir), str(out)])
    assert r.exit_code == 2 and "exists" in r.output
    r = CliRunner().invoke(app, ["export", str(tmp_path / "nope"), str(tmp_path / "o2")])
    assert r.exit_code == 2 and "not a run directory" in r.output
    assert not (tmp_path / "o2").exists()

    if torch.cuda.is_available():
        return
    # a run saved on a CUDA machine, by an earlier version (its keys for where work runs),
    # exports and evaluates on this CPU-only one
    config = run_dir / "config.yaml"
    config.write_text(earlier_keys(config.read_text().replace("device: auto", "device: cuda")))
    r = CliRunner().invoke(app, ["export", str(run_dir), str(tmp_path / "o3")])
    assert r.exit_code == 0, r.output
    assert "model.device cuda (saved by the run) is not on this machine; using auto" in r.output
    r = CliRunner().invoke(
        app,
        ["eval", str(run_dir), "--tasks", "1", "--no-baselines", "--records", str(tmp_path / "e")],
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "e" / "episodes.jsonl").exists()


@pytest.fixture
def random_user_model(tmp_path) -> Path:
    """A user's model directory: a small random-weight Llama with a byte-level BPE tokenizer
    and a ChatML chat template with tools."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from turnrl.envs.guess import GuessEnv
    from turnrl.tiny.model import train_tokenizer

    names = [t["function"]["name"] for t in GuessEnv().tool_schemas()]
    tok = train_tokenizer(["guess the hidden number", "higher lower correct"], 300, names)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    path = tmp_path / "user-model"
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_lora_run_exports_merged_policy_and_adapter(tmp_path, random_user_model):
    pytest.importorskip("peft", reason="LoRA needs peft (dev extra)")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    overrides = [
        "name=lora",
        f"runs_dir={tmp_path / 'runs'}",
        f"model.name={random_user_model}",
        "model.lora=true",
        "model.lora_targets=[q_proj, v_proj]",
        "sft.enabled=false",
        *GUESS,
    ]
    run_dir = train(load_config(None, overrides), quiet=True, log=lambda s: None)

    merged = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    assert not any("lora" in n for n, _ in merged.named_parameters())
    tok = AutoTokenizer.from_pretrained(run_dir / "model")
    assert tok.chat_template == AutoTokenizer.from_pretrained(random_user_model).chat_template
    ids = torch.tensor([tok("guess the number 5")["input_ids"]])
    base = AutoModelForCausalLM.from_pretrained(random_user_model)
    with_adapter = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(random_user_model), run_dir / "adapter"
    )
    assert torch.allclose(logits_of(merged, ids), logits_of(with_adapter, ids), atol=1e-5)
    assert (logits_of(merged, ids) - logits_of(base, ids)).abs().max() > 1e-4  # it trained
    record = json.loads((run_dir / "model" / "turnrl.json").read_text())
    assert record["lora_merged"] and record["source"] == str(random_user_model)

    # resume: base from the source, adapters from the checkpoint, one more step
    resumed = train(
        load_config(run_dir / "config.yaml", ["steps=3"]),
        resume_dir=run_dir,
        quiet=True,
        log=lambda s: None,
    )
    assert json.loads((resumed / "model" / "turnrl.json").read_text())["step"] == 3
