"""The trained policy as a plain transformers directory: ``run_dir/model``.

``save_policy`` writes the policy as it is now (``save_pretrained`` weights + config, the
tokenizer with its chat template, and ``turnrl.json`` saying where the model came from), so
``AutoModelForCausalLM.from_pretrained(run_dir / "model")`` needs no turnrl. A LoRA policy is
written merged (W + scale * B @ A per adapted layer), and its adapters alone go beside it to
``run_dir/adapter`` (loadable with ``peft.PeftModel.from_pretrained``).

The training loop calls it when a run starts and at every checkpoint, so ``run_dir/model``
always holds the latest policy, and ``turnrl eval RUN`` loads it. ``--resume`` reads the
tokenizer from it; the weights it rebuilds as the starting policy plus the checkpoint, because
the KL reference must stay the starting policy (``turnrl.json`` names its source).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from turnrl.policy.models import model_source

MODEL_DIR = "model"
ADAPTER_DIR = "adapter"
SOURCE_FILE = "turnrl.json"


def merged_state_dict(model: torch.nn.Module) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The underlying transformers model and its weights with every LoRA layer merged, the
    training model left untouched (peft's ``merge_and_unload`` would change it in place, and
    merging then unmerging in bf16 would round the base weights)."""
    base = model.get_base_model()
    state: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if not hasattr(module, "get_delta_weight") or not hasattr(module, "base_layer"):
            continue
        w = module.base_layer.weight.detach()
        delta = sum(module.get_delta_weight(a) for a in module.active_adapters)
        state[f"{name}.weight"] = (w.float() + delta.float()).to(w.dtype)
    for key, value in base.state_dict().items():
        if "lora_" in key:
            continue
        key = key.replace(".base_layer.", ".")
        state.setdefault(key, value)
    return base, state


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "get_base_model") and hasattr(model, "peft_config")


def write_policy(
    out: Path,
    model: torch.nn.Module,
    tokenizer: Any,
    source: str,
    step: int,
    adapter_out: Path | None,
) -> Path:
    """Write the policy to ``out`` (merged, if LoRA; its adapters to ``adapter_out``),
    replacing a previous copy only once the new one is complete."""
    lora = is_lora(model)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if lora:
        base, state = merged_state_dict(model)
        base.save_pretrained(tmp, state_dict=state)
    else:
        model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    path, kwargs = model_source(source)
    record = {
        "source": source,  # the name or path the run was started from
        "source_path": str(Path(path).resolve()) if Path(path).exists() else path,
        **kwargs,
        "step": step,
        "lora_merged": lora,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
    }
    if lora and adapter_out is not None:
        adapter_tmp = adapter_out.with_name(adapter_out.name + ".tmp")
        shutil.rmtree(adapter_tmp, ignore_errors=True)
        model.save_pretrained(adapter_tmp)
        _replace_dir(adapter_tmp, adapter_out)
        record["adapter"] = os.path.relpath(adapter_out, out)
    (tmp / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    _replace_dir(tmp, out)
    return out


def save_policy(
    run_dir: Path, model: torch.nn.Module, tokenizer: Any, source: str, step: int
) -> Path:
    """The run's copy: ``run_dir/model`` (+ ``run_dir/adapter`` for LoRA)."""
    return write_policy(run_dir / MODEL_DIR, model, tokenizer, source, step, run_dir / ADAPTER_DIR)


def _replace_dir(new: Path, target: Path) -> None:
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(new, target)
    shutil.rmtree(old, ignore_errors=True)


def saved_policy(run_dir: Path) -> Path | None:
    """``run_dir/model`` if it holds a policy written by :func:`save_policy`, else None (no
    policy yet, or a run made before it existed: warm start in ``model``, weights in
    ``checkpoints/last.pt``)."""
    path = run_dir / MODEL_DIR
    return path if (path / SOURCE_FILE).exists() else None


def tokenizer_source(run_dir: Path, name: str) -> str:
    """Where a run reads its tokenizer (and chat template): its own copy once it has one."""
    saved = saved_policy(run_dir)
    return name if saved is None else str(saved)
