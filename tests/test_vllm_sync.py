"""How the training loop keeps a vLLM sampler in step, run on CPU through ``train`` with the
engine replaced by a transformers model that takes the same pushes: the push schedule
(``sync_every``, and before each held-out evaluation), the version every sampled token records
(what the engine holds, not what the trainer holds), the version after a resume, and LoRA
adapters saved and handed over instead of merged weights. What vLLM itself does with them is
checked on a GPU by tests/test_vllm_backend.py and scripts/gpu_scale_check.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import turnrl.policy.vllm as vllm_mod
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import load_tokenizer
from turnrl.policy.vllm import save_adapter, save_base, vllm_lora_rank
from turnrl.run.config import ConfigError, load_config
from turnrl.run.recipe import train

RUN = [
    "model.name=tiny",
    "env.name=guess",
    "env.options={low: 1, high: 4}",
    "env.eval_tasks=2",
    "env.train_tasks=8",
    "rollout.sampler=vllm",
    "rollout.tasks_per_step=2",
    "rollout.group_size=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=8",
    "rollout.max_context_tokens=256",
    "algo.entropy_coef=0.01",  # a gradient even when every reward is 0
    "optim.lr=0.01",
    "optim.minibatch_size=4",
    "optim.micro_batch_size=4",
    "model.device=cpu",
    "threads=1",
    "tiny.vocab_size=320",
    "tiny.hidden_size=32",
    "tiny.layers=1",
    "seed=3",
]


class FakeEngine:
    """Stands in for ``VLLMPolicy``: a transformers copy of the model it was started from that
    changes only through ``load_weights``/``load_adapter``, as vLLM's would."""

    made: list[FakeEngine] = []

    def __init__(self, model: str, *, lora_rank: int | None = None, tokenizer=None, **kw):
        self.path, self.lora_rank, self.kwargs = Path(model), lora_rank, kw
        self.base = AutoModelForCausalLM.from_pretrained(model).eval()
        self.pad = load_tokenizer(tokenizer or model).pad_token_id
        self.model = copy.deepcopy(self.base)
        self.version = -1  # nothing pushed yet
        self.pushes: list[tuple[int, str]] = []
        self.adapter: Path | None = None
        FakeEngine.made.append(self)

    def generate_batch(self, prompts, params, seeds=None):
        hf = HFPolicy(self.model, self.pad, prefix_cache_tokens=0)
        hf.version = self.version
        return hf.generate_batch(prompts, params, seeds)

    def load_weights(self, state_dict, version):
        self.model.load_state_dict({k: v.detach().clone() for k, v in state_dict.items()})
        self.version = version
        self.pushes.append((version, "weights"))

    def load_adapter(self, path, version):
        from peft import PeftModel

        self.model = PeftModel.from_pretrained(copy.deepcopy(self.base), path).eval()
        self.adapter, self.version = Path(path), version
        self.pushes.append((version, "adapter"))


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setattr(vllm_mod, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_mod, "VLLMPolicy", FakeEngine)
    FakeEngine.made = []
    return FakeEngine.made


def rows(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "loss" in r]


def test_pushes_every_sync_every_steps_and_tokens_record_the_held_version(tmp_path, fake_vllm):
    cfg = load_config(None, RUN + [f"runs_dir={tmp_path}", "steps=3", "sync_every=2"])
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    (engine,) = fake_vllm
    assert engine.kwargs["gpu_memory_utilization"] == 0.4 and engine.lora_rank is None
    # at start (version 0), after 2 updates, and at step 3 for the final evaluation
    assert engine.pushes == [(0, "weights"), (2, "weights"), (3, "weights")]
    got = [(r["step"], r["policy_version"], r["vllm/staleness_max"]) for r in rows(run_dir)]
    # step 2 trains on tokens sampled by version 0 while the trainer held version 1
    assert got == [(1, 1, 0.0), (2, 2, 1.0), (3, 3, 0.0)]
    trained = AutoModelForCausalLM.from_pretrained(run_dir / "model").state_dict()
    held = engine.model.state_dict()
    assert all(torch.equal(held[k], v) for k, v in trained.items())

    # resume to step 5: the new engine holds the checkpoint's weights as its version 3
    cfg = load_config(None, RUN + [f"runs_dir={tmp_path}", "steps=5", "sync_every=2"])
    train(cfg, resume_dir=run_dir, quiet=True, log=lambda s: None)
    resumed = fake_vllm[1]
    assert resumed.pushes == [(3, "weights"), (5, "weights")]
    got = [(r["step"], r["policy_version"], r["vllm/staleness_max"]) for r in rows(run_dir)]
    assert got[3:] == [(4, 4, 0.0), (5, 5, 1.0)]


@pytest.fixture
def pretrained(tmp_path, fake_vllm) -> list[str]:
    """A small transformers model folder (LoRA applies to a pretrained model, not the tiny one
    trained from scratch): the policy of a run with no steps."""
    cfg = load_config(None, RUN + [f"runs_dir={tmp_path / 'start'}", "steps=0"])
    start = train(cfg, quiet=True, log=lambda s: None)
    fake_vllm.clear()
    keep = [o for o in RUN if not o.startswith("tiny.")]
    return keep + [f"model.name={start / 'model'}", "sft.enabled=false", f"runs_dir={tmp_path}"]


def test_lora_adapters_are_pushed_as_adapters_on_the_frozen_base(pretrained, fake_vllm):
    lora = ["model.lora=true", "model.lora_rank=4", "model.lora_targets=[q_proj, v_proj]"]
    cfg = load_config(None, pretrained + lora + ["steps=2"])
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    (engine,) = fake_vllm
    assert engine.path == run_dir / "vllm" / "base" and engine.lora_rank == 4
    assert engine.pushes == [(0, "adapter"), (1, "adapter"), (2, "adapter")]
    adapters = run_dir / "vllm" / "adapters"
    assert (
        sorted(p.name for p in adapters.iterdir()) == ["v2"] and engine.adapter == adapters / "v2"
    )
    # base + the last adapter, as the engine loaded them from disk, is the trained policy
    # (run_dir/model, merged), and the base alone is not (the adapters moved)
    ids = torch.tensor([[1, 5, 9, 14, 20, 33]])
    merged = AutoModelForCausalLM.from_pretrained(run_dir / "model").eval()
    with torch.no_grad():
        want, got, base = (m(ids).logits for m in (merged, engine.model, engine.base))
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(base, want, atol=1e-3)


def test_merged_push_for_lora_when_asked(pretrained, fake_vllm):
    extra = ["model.lora=true", "model.lora_rank=4", "rollout.vllm_lora=merged", "steps=1"]
    cfg = load_config(None, pretrained + extra)
    run_dir = train(cfg, quiet=True, log=lambda s: None)
    (engine,) = fake_vllm
    assert engine.path == run_dir / "model" and engine.lora_rank is None
    assert engine.pushes == [(0, "weights"), (1, "weights")]
    assert not (run_dir / "vllm").exists()


def tiny_peft():
    from peft import LoraConfig, get_peft_model

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2,
    )  # fmt: skip
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    return get_peft_model(LlamaForCausalLM(config), lora)


def test_save_adapter_writes_the_current_adapter_and_prunes_older_ones(tmp_path):
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    model = tiny_peft()
    first = save_adapter(model, tmp_path, 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
    second = save_adapter(model, tmp_path, 2)
    assert second == tmp_path / "v2" and not first.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v2"]
    saved = load_file(second / "adapter_model.safetensors")
    current = get_peft_model_state_dict(model)
    assert saved.keys() == current.keys()
    assert all(torch.equal(saved[k], current[k]) for k in current)
    assert save_adapter(model, tmp_path, 2) == second  # a resumed run saves its version again


def test_save_base_drops_the_adapters_without_merging_them(tmp_path):
    model = tiny_peft()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)  # a merge would change q_proj and v_proj
    out = save_base(model, tmp_path / "base")
    base = LlamaForCausalLM.from_pretrained(out).state_dict()
    want = {
        k.replace(".base_layer.", "."): v
        for k, v in model.get_base_model().state_dict().items()
        if "lora_" not in k
    }
    assert base.keys() == want.keys()
    assert all(torch.equal(base[k], want[k]) for k in want)


def test_vllm_lora_rank_rounds_up_to_a_served_rank():
    assert [vllm_lora_rank(r) for r in (1, 8, 9, 64, 300, 512)] == [8, 8, 16, 64, 320, 512]
    with pytest.raises(ValueError, match="up to 512"):
        vllm_lora_rank(513)


BAD = [
    (["sync_every=2"], "sync_every=2 must be <= max_staleness + 1 = 1"),
    (["rollout.vllm_gpu_memory=0.5"], "rollout.vllm_gpu_memory: only with rollout.sampler=vllm"),
    (
        ["rollout.sampler=vllm", "rollout.vllm_gpu_memory=0.95"],
        "rollout.vllm_gpu_memory=0.95: the trainer shares cuda:0 with vLLM",
    ),
    (["rollout.sampler=vllm", "rollout.vllm_gpu_memory=1"], "rollout.vllm_gpu_memory: Input"),
    (["rollout.sampler=vllm", "rollout.vllm_lora=merged"], "only with model.lora=true"),
    (
        ["rollout.sampler=vllm", "model.name=smollm2", "model.lora=true", "model.lora_rank=1024"],
        "model.lora_rank=1024: vLLM serves LoRA ranks up to 512",
    ),
    (["model.device=cuda:1"], "model.device: cuda:1 asked for, but no CUDA device is visible"),
    (["model.device=gpu"], "model.device: String should match pattern"),
    (["model.lora=true"], "model.lora: the tiny model trains all its weights"),
]


@pytest.mark.parametrize("extra, message", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_vllm_combinations_fail_in_one_line(extra, message, tmp_path, monkeypatch):
    if torch.cuda.is_available() and "cuda:1" in extra[0]:
        pytest.skip("a GPU is visible: cuda:1 may exist")
    from typer.testing import CliRunner

    from turnrl.cli import app

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", "model.name=tiny", "env.name=guess", *extra])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "runs").exists()


def test_vllm_sync_every_needs_no_staleness_setting():
    """Synchronous vLLM lags by at most sync_every - 1 by construction; max_staleness bounds
    only asynchronous producers."""
    cfg = load_config(
        None, ["model.name=tiny", "env.name=guess", "rollout.sampler=vllm", "sync_every=4"]
    )
    assert cfg.sync_every == 4
    with pytest.raises(ConfigError, match="sync_every=4 must be <= max_staleness"):
        load_config(None, ["model.name=tiny", "env.name=guess", "max_staleness=1", "sync_every=4"])


def test_vllm_policy_passes_the_adapter_to_every_generation(monkeypatch, tmp_path):
    """``VLLMPolicy``'s own plumbing with vLLM's classes replaced by recorders (the engine's
    behaviour is tests/test_vllm_backend.py's, on a GPU): LoRA enabled at the rank vLLM
    serves, and each push a new request, with a new id, naming the pushed folder."""
    import sys
    import types
    from dataclasses import dataclass

    @dataclass
    class LoRARequest:
        lora_name: str
        lora_int_id: int
        lora_path: str

    class LLM:
        def __init__(self, **kwargs):
            self.kwargs, self.requests = kwargs, []

        def generate(self, prompts, sampling, use_tqdm=False, lora_request=None):
            self.requests.append(lora_request)
            out = types.SimpleNamespace(
                token_ids=[5], logprobs=[{5: types.SimpleNamespace(logprob=-1.0)}]
            )
            return [types.SimpleNamespace(outputs=[out]) for _ in prompts]

        def reset_prefix_cache(self):
            pass

    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = LLM, lambda **kw: kw
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: prompt_token_ids
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    for name, mod in [
        ("vllm", fake),
        ("vllm.inputs", inputs),
        ("vllm.lora", types.ModuleType("vllm.lora")),
        ("vllm.lora.request", request),
    ]:
        monkeypatch.setitem(sys.modules, name, mod)

    for var in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_ALLOW_INSECURE_SERIALIZATION"):
        monkeypatch.setenv(var, "0")  # restored after the test; the engine sets its defaults
    from turnrl.policy.base import SamplingParams

    engine = vllm_mod.VLLMPolicy("base", lora_rank=4)
    assert engine.llm.kwargs["enable_lora"] and engine.llm.kwargs["max_lora_rank"] == 8
    assert engine.llm.kwargs["max_loras"] == 1
    params = SamplingParams(temperature=1.0, max_new_tokens=1)
    engine.generate_batch([[1, 2]], params, [0])
    engine.load_adapter(tmp_path / "v3", 3)
    (g,) = engine.generate_batch([[1, 2]], params, [0])
    engine.load_adapter(tmp_path / "v4", 4)
    engine.generate_batch([[1, 2]], params, [0])
    first, second, third = engine.llm.requests
    assert first is None and g.policy_version == 3 and engine.version == 4
    assert (second.lora_path, third.lora_path) == (str(tmp_path / "v3"), str(tmp_path / "v4"))
    assert 0 < second.lora_int_id < third.lora_int_id
    assert vllm_mod.VLLMPolicy("base").llm.kwargs.get("enable_lora") is None
