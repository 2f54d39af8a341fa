"""The vLLM backend (GPU): batched sampling from token ids with per-token logprobs, and weight
updates pushed from the trainer (full weights or a LoRA adapter; the loop's schedule is
:mod:`turnrl.run.sampler`).

Same contract as :class:`turnrl.policy.hf.HFPolicy` (``generate_batch``, ``version``, ``lock``):
token ids in, token ids + logprobs out, one seeded generator per row, the stop token included
when one was hit. vLLM is imported only when a ``VLLMPolicy`` is built, so the rest of turnrl
works without it.

Choices, and why:

* Logprobs are requested as ``processed_logprobs`` (after temperature), the quantity the
  trainer recomputes as ``log_softmax(logits / T)``; vLLM's default reports the raw,
  untempered distribution. With ``top_p < 1`` vLLM's processed logprobs are those of the
  truncated, renormalised distribution while the hf backend reports the untruncated one: keep
  ``top_p = 1`` when ratios against behaviour logprobs matter (or correct with ``tis``).
* ``ignore_eos=True``: only ``SamplingParams.stop_token_ids`` end a turn, as in the hf backend.
* Weight sync is ``llm.apply_model(lambda m: m.load_weights(...))`` (vLLM >= 0.9; each worker
  loads the HF-named tensors, vLLM fuses q/k/v itself), then the prefix cache is reset so no
  KV block computed with the old weights is reused. The engine runs in-process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so no tensor is pickled; with tensor parallelism or a
  separate engine process, use NCCL weight broadcast instead (not implemented here). A PEFT
  model is pushed either merged (full weights, any architecture) or as its adapter: the engine
  starts from the frozen base (:func:`save_base`) with ``enable_lora``, and each push saves the
  adapter (:func:`save_adapter`) and samples with a new ``LoRARequest`` pointing at it, which
  moves a few MB instead of the whole model.
* Placement: the in-process engine runs on the first visible GPU (``cuda:0``) and takes
  ``gpu_memory_utilization`` of that GPU's memory (weights + KV cache); the trainer is
  colocated there or on another GPU (``model.device=cuda:1``).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from turnrl.policy.base import Generation, SamplingParams

NEEDS = "the vllm backend needs a CUDA GPU and the vllm package (pip install 'turnrl[vllm]')"
# the LoRA ranks vLLM's kernels are built for (LoRAConfig.max_lora_rank must be one of them)
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of ``rank``."""
    for r in VLLM_LORA_RANKS:
        if rank <= r:
            return r
    raise ValueError(f"model.lora_rank={rank}: vLLM serves LoRA ranks up to {VLLM_LORA_RANKS[-1]}")


def vllm_available() -> bool:
    """True where vLLM can run: the package imports and a CUDA device is visible."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


class VLLMPolicy:
    """A vLLM engine used as the rollout sampler. ``model`` is a HF model folder (the
    trainer's saved weights at start); later weights arrive through :meth:`load_weights`."""

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.4,
        max_model_len: int | None = None,
        seed: int = 0,
        lora_rank: int | None = None,
        **engine_kwargs: Any,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model's closure
        try:
            from vllm import LLM
        except ImportError as e:
            raise ImportError(NEEDS) from e
        kwargs: dict[str, Any] = dict(
            model=model,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            enable_prefix_caching=True,
            **engine_kwargs,
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if lora_rank is not None:  # adapters arrive through load_adapter; one active at a time
            kwargs.update(enable_lora=True, max_lora_rank=vllm_lora_rank(lora_rank), max_loras=1)
        try:
            self.llm = LLM(logprobs_mode="processed_logprobs", **kwargs)
        except TypeError:  # vLLM < 0.10.2 has no logprobs_mode (reports raw logprobs)
            self.llm = LLM(**kwargs)
        self.version = 0
        self.lock = threading.Lock()
        self.lora_request: Any = None  # the adapter every generation uses (None: the base)
        self._lora_ids = 0  # vLLM caches adapters by id: each push gets a new one (>= 1)

    def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[Generation]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        seeds = seeds if seeds is not None else [None] * len(prompts)
        sampling = [
            VLLMSamplingParams(
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                stop_token_ids=list(params.stop_token_ids),
                ignore_eos=True,
                logprobs=0,  # the sampled token's own logprob
                seed=seed,
                detokenize=False,
                skip_special_tokens=False,
            )
            for seed in seeds
        ]
        with self.lock:
            outputs = self.llm.generate(
                [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                sampling,
                use_tqdm=False,
                lora_request=self.lora_request,
            )
            version = self.version
        stop = set(params.stop_token_ids)
        out = []
        for o in outputs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            logprobs = [float(c.logprobs[i][t].logprob) for i, t in enumerate(ids)]
            out.append(Generation(ids, logprobs, bool(ids) and ids[-1] in stop, version))
        return out

    def load_weights(self, state_dict: Mapping[str, Any], version: int | None = None) -> None:
        """Load the trainer's weights (HF names) between two generation batches."""
        weights = [(name, t.detach()) for name, t in state_dict.items()]

        def load(model: Any) -> None:
            model.load_weights(weights=weights)

        with self.lock:
            self.llm.apply_model(load)
            self.llm.reset_prefix_cache()
            self.version = self.version + 1 if version is None else version

    def load_adapter(self, path: str | Path, version: int) -> None:
        """Sample from now on with the LoRA adapter saved in ``path`` (PEFT's format)."""
        from vllm.lora.request import LoRARequest

        with self.lock:
            self._lora_ids += 1
            self.lora_request = LoRARequest(f"policy-v{version}", self._lora_ids, str(path))
            self.llm.reset_prefix_cache()
            self.version = version


def save_base(model: Any, out: Path) -> Path:
    """The frozen base of a PEFT ``model`` as a transformers folder (LoRA layers dropped, not
    merged), for an engine that receives the adapters; written once per run, atomically (the
    base never trains, so a resumed run reuses it)."""
    if (out / "config.json").exists():
        return out
    base = model.get_base_model()
    state = {
        k.replace(".base_layer.", "."): v for k, v in base.state_dict().items() if "lora_" not in k
    }
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    base.save_pretrained(tmp, state_dict=state)
    os.replace(tmp, out)
    return out


def save_adapter(model: Any, folder: Path, version: int) -> Path:
    """Save the PEFT ``model``'s adapter as ``folder/v{version}`` (written aside, then renamed
    in place) and delete older ones: the engine holds only the adapter of its last push."""
    out = folder / f"v{version}"
    tmp = folder / f"v{version}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)  # the same version saved before a resume
    os.replace(tmp, out)
    for old in folder.iterdir():
        if old != out:
            shutil.rmtree(old, ignore_errors=True)
    return out
