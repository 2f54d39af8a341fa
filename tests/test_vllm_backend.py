"""The backend contract every sampler must meet, run on hf always and on vllm where a CUDA GPU
and the vllm package are present: logprobs equal the trainer's scoring, stop tokens end a turn
and are kept, seeds make rows deterministic and independent of their batch, and weight
updates reach the sampler with the version recorded."""

from __future__ import annotations

import pytest
import torch

from turnrl.policy.base import SamplingParams
from turnrl.policy.hf import HFPolicy
from turnrl.policy.vllm import NEEDS, vllm_available
from turnrl.tiny.model import tiny_model, train_tokenizer


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer([f"say {i} ok go something" for i in range(200)], vocab_size=300)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Backend:
    """A backend under test, its reference scorer (the trainer's model) and how to update it."""

    def __init__(self, kind: str, tok, tmp_path_factory) -> None:
        self.kind = kind
        self.model = tiny_model(tok, seed=0, hidden_size=64, layers=2).eval()
        self.reference = HFPolicy(self.model, tok.pad_token_id)
        if kind == "hf":
            self.policy = self.reference
            self.tol = 1e-4
        else:
            from turnrl.policy.vllm import VLLMPolicy

            folder = tmp_path_factory.mktemp("tiny")
            self.model.save_pretrained(folder)
            tok.save_pretrained(folder)
            self.policy = VLLMPolicy(str(folder), dtype="float32", enforce_eager=True)
            self.tol = 2e-3

    def update(self, version: int) -> None:
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        if self.kind == "hf":
            self.policy.version = version  # the sampler is the trainer's own model
        else:
            self.policy.load_weights(self.model.state_dict(), version)


@pytest.fixture(scope="module", params=["hf", "vllm"])
def backend(request, tok, tmp_path_factory):
    if request.param == "vllm" and not vllm_available():
        pytest.skip("vllm backend needs a CUDA GPU and the vllm package; none here")
    return Backend(request.param, tok, tmp_path_factory)


PROMPTS = [[1, 40, 41, 42], [1, 50, 51], [1, 60, 61, 62, 63, 64]]


def params(**kw) -> SamplingParams:
    return SamplingParams(**{"temperature": 0.7, "max_new_tokens": 8, **kw})


def test_logprobs_match_the_trainers_scoring(backend):
    gens = backend.policy.generate_batch(PROMPTS, params(), [1, 2, 3])
    for prompt, g in zip(PROMPTS, gens):
        assert len(g.token_ids) == len(g.logprobs) == 8 and not g.stopped
        scored = backend.reference.score([prompt + g.token_ids], temperature=0.7)[0]
        assert g.logprobs == pytest.approx(scored[len(prompt) :], abs=backend.tol)


def test_stop_token_ends_the_turn_and_is_kept(backend):
    vocab = backend.model.config.vocab_size
    every = tuple(range(vocab))  # whatever is drawn first is a stop token
    for g in backend.policy.generate_batch(PROMPTS, params(stop_token_ids=every), [4, 5, 6]):
        assert g.stopped and len(g.token_ids) == 1 and g.token_ids[0] in every
    stop = (7,)
    for g in backend.policy.generate_batch(
        PROMPTS * 4, params(max_new_tokens=24, stop_token_ids=stop), list(range(12))
    ):
        assert g.stopped == (g.token_ids[-1] == 7)
        assert 7 not in g.token_ids[:-1]
        assert g.stopped or len(g.token_ids) == 24


def test_seeds_are_deterministic_and_batch_independent(backend):
    a = backend.policy.generate_batch(PROMPTS, params(), [11, 12, 13])
    b = backend.policy.generate_batch(PROMPTS, params(), [11, 12, 13])
    alone = backend.policy.generate_batch(PROMPTS[1:2], params(), [12])
    other = backend.policy.generate_batch(PROMPTS, params(), [21, 22, 23])
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert alone[0].token_ids == a[1].token_ids
    assert [g.token_ids for g in a] != [g.token_ids for g in other]


def test_weight_updates_reach_the_sampler_with_their_version(backend):
    before = backend.policy.generate_batch(PROMPTS, params(), [31, 32, 33])
    assert {g.policy_version for g in before} == {backend.policy.version}
    version = backend.policy.version + 1
    backend.update(version)
    after = backend.policy.generate_batch(PROMPTS, params(), [31, 32, 33])
    assert {g.policy_version for g in after} == {version}
    for prompt, g in zip(PROMPTS, after):  # sampled from the new weights
        scored = backend.reference.score([prompt + g.token_ids], temperature=0.7)[0]
        assert g.logprobs == pytest.approx(scored[len(prompt) :], abs=backend.tol)


def test_vllm_module_imports_without_vllm():
    """The module is importable anywhere; building the engine without vllm names the need."""
    import turnrl.policy.vllm as mod

    if vllm_available():
        pytest.skip("vllm is installed here")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="CUDA GPU and the vllm package"):
            mod.VLLMPolicy("nowhere")
    assert "vllm" in NEEDS


def test_lora_adapter_pushes_reach_vllm(tok, tmp_path):
    """A PEFT model's adapter saved and handed over as a LoRARequest: vLLM then samples from
    base + adapter (the trainer's scoring), not from the base it started with."""
    if not vllm_available():
        pytest.skip("vllm backend needs a CUDA GPU and the vllm package; none here")
    from peft import LoraConfig, get_peft_model

    from turnrl.policy.vllm import VLLMPolicy, save_adapter, save_base

    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = get_peft_model(tiny_model(tok, seed=0, hidden_size=64, layers=2), lora).eval()
    base_dir = save_base(model, tmp_path / "base")
    tok.save_pretrained(base_dir)
    engine = VLLMPolicy(str(base_dir), dtype="bfloat16", enforce_eager=True, lora_rank=8)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.5)
    engine.load_adapter(save_adapter(model, tmp_path / "adapters", 1), 1)
    gens = engine.generate_batch(PROMPTS, params(), [1, 2, 3])
    adapted = HFPolicy(model, tok.pad_token_id)
    base = HFPolicy(model.get_base_model(), tok.pad_token_id)
    for prompt, g in zip(PROMPTS, gens):
        assert g.policy_version == 1
        want = adapted.score([prompt + g.token_ids], temperature=0.7)[0][len(prompt) :]
        assert g.logprobs == pytest.approx(want, abs=0.05)  # bf16 engine, fp32 trainer
        with model.disable_adapter():
            plain = base.score([prompt + g.token_ids], temperature=0.7)[0][len(prompt) :]
        assert max(abs(a - b) for a, b in zip(plain, want)) > 0.1  # the adapter matters
