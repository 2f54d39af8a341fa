"""``turnrl eval``: a trained run or a model on held-out tasks, beside scripted baselines."""

from __future__ import annotations

import asyncio
from pathlib import Path

from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.envs.registry import make_family
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import load_model, load_tokenizer, turn_end_token
from turnrl.train.config import TrainConfig
from turnrl.train.evaluate import evaluate_policy, evaluate_scripted
from turnrl.train.loop import _sampling, limits_of, rubric_of


def _load(cfg: TrainConfig, run_dir: Path | None):
    if run_dir is not None and (run_dir / "model" / "config.json").exists():
        from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

        model = AutoModelForCausalLM.from_pretrained(run_dir / "model")
        tok = PreTrainedTokenizerFast.from_pretrained(run_dir / "model")
    else:
        model, tok = load_model(cfg.model.name), load_tokenizer(cfg.model.name)
    ckpt = run_dir / "checkpoints" / "last.pt" if run_dir is not None else None
    if ckpt is not None and ckpt.exists():
        import torch

        if cfg.model.lora:
            from peft import LoraConfig, get_peft_model

            m = cfg.model
            model = get_peft_model(
                model,
                LoraConfig(
                    r=m.lora_rank,
                    lora_alpha=m.lora_alpha,
                    target_modules=m.lora_targets,
                    lora_dropout=0.0,
                    task_type="CAUSAL_LM",
                ),
            )
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"], strict=False)
    return model, tok


def run_eval(
    cfg: TrainConfig, run_dir: Path | None, k: int = 1, n_tasks: int = 40, baselines: bool = True
) -> dict:
    import torch

    torch.set_num_threads(cfg.threads)
    family = make_family(cfg.env.name, cfg.env.options)
    try:
        tasks = family.tasks("test", n_tasks, seed=cfg.seed)
        model, tok = _load(cfg, run_dir)
        renderer = ChatRenderer(tok, HermesToolCallParser(), turn_end_token(tok))
        policy = HFPolicy(model, tok.pad_token_id)
        result, _ = asyncio.run(
            evaluate_policy(
                family,
                tasks,
                renderer,
                policy,
                _sampling(cfg, renderer, evaluation=True),
                limits_of(cfg),
                k=k,
                seed=cfg.seed,
                rubric=rubric_of(cfg),
            )
        )
        out: dict = {
            "env": cfg.env.name,
            "tasks": len(tasks),
            **{k_: v for k_, v in result.__dict__.items()},
        }
        out[f"pass^{k}"] = out.pop("pass_hat_k")
        out[f"pass@{k}"] = out.pop("pass_at_k")
        if baselines:
            out["baseline/do_nothing"] = asyncio.run(evaluate_scripted(family, tasks, "baseline"))
            if hasattr(family, "random_agent"):
                out["baseline/random"] = asyncio.run(
                    evaluate_scripted(family, tasks, "random", seed=cfg.seed)
                )
        return out
    finally:
        family.close()
