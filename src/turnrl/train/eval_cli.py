"""``turnrl eval``: a trained run or a model on held-out tasks, beside scripted baselines.

By default it scores exactly what the run's own held-out evaluation scored: the first
``env.eval_tasks`` test tasks, sampled with :func:`~turnrl.train.evaluate.eval_seed`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from turnrl.chat import check_model_template, check_template
from turnrl.envs.registry import make_family
from turnrl.policy.hf import HFPolicy
from turnrl.policy.models import load_model, load_tokenizer, place
from turnrl.train.config import TrainConfig
from turnrl.train.evaluate import eval_seed, evaluate_policy, evaluate_scripted
from turnrl.train.export import saved_policy
from turnrl.train.loop import _sampling, limits_of, rubric_of


def load_policy(cfg: TrainConfig, run_dir: Path | None):
    """(model, tokenizer) of a run's latest policy (``run_dir/model``), or of ``model.name``
    when there is no run; placed per ``model.device``/``model.dtype``. A run made before
    ``run_dir/model`` held the trained policy gets its checkpoint applied to the warm start."""
    m = cfg.model
    saved = saved_policy(run_dir) if run_dir is not None else None
    if saved is not None:
        tok = load_tokenizer(saved, m.trust_remote_code)
        return load_model(saved, m.dtype, m.device, m.trust_remote_code), tok
    if run_dir is not None and (run_dir / "model" / "config.json").exists():
        from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

        model = AutoModelForCausalLM.from_pretrained(run_dir / "model")
        tok = PreTrainedTokenizerFast.from_pretrained(run_dir / "model")
    else:
        model = load_model(m.name, m.dtype, m.device, m.trust_remote_code)
        tok = load_tokenizer(m.name, m.trust_remote_code)
    ckpt = run_dir / "checkpoints" / "last.pt" if run_dir is not None else None
    if ckpt is not None and ckpt.exists():
        import torch

        if cfg.model.lora:
            from peft import LoraConfig, get_peft_model

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
    return place(model, m.device, m.dtype), tok


def run_eval(
    cfg: TrainConfig,
    run_dir: Path | None,
    k: int = 1,
    n_tasks: int | None = None,
    baselines: bool = True,
) -> dict:
    """``n_tasks`` None: the run's ``env.eval_tasks``."""
    import torch

    torch.set_num_threads(cfg.threads)
    if run_dir is None:  # the template contract, before the env starts or weights load
        check_model_template(cfg.model.name, cfg.model.tool_format)
    family = make_family(cfg.env.name, cfg.env.options, cfg.env.tasks)
    try:
        tasks = family.tasks("test", n_tasks or cfg.env.eval_tasks, seed=cfg.seed)
        model, tok = load_policy(cfg, run_dir)
        renderer = check_template(tok, cfg.model.tool_format, source=cfg.model.name)
        policy = HFPolicy(model, tok.pad_token_id)
        if cfg.subagent.enabled:  # the run's delegate tool and its frozen subagent
            from turnrl.rollout.subagent import eval_subagent

            family = eval_subagent(cfg, family, run_dir, model, tok, renderer)
        result, _ = asyncio.run(
            evaluate_policy(
                family,
                tasks,
                renderer,
                policy,
                _sampling(cfg, renderer, evaluation=True),
                limits_of(cfg),
                k=k,
                seed=eval_seed(cfg),
                batch_wait_s=cfg.rollout.batch_wait_s,
                rubric=rubric_of(cfg, family),
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
            if hasattr(family, "baseline"):
                out["baseline/do_nothing"] = asyncio.run(
                    evaluate_scripted(family, tasks, "baseline")
                )
            if hasattr(family, "random_agent"):
                out["baseline/random"] = asyncio.run(
                    evaluate_scripted(family, tasks, "random", seed=cfg.seed)
                )
        return out
    finally:
        family.close()
