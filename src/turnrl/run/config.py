"""One typed config schema for a run.

Sources, later ones winning: the schema's defaults, a recipe (``recipe=NAME``, a YAML file in
``turnrl/recipes``), a YAML file (``--config FILE``), and ``key=value`` overrides with
dotted paths (``algo.advantage=rloo``). Unknown keys and bad values fail before any work starts,
all reported together, each naming its field.

Validation here checks values only: it never imports the user's env, probes a device or reads a
file, so a saved ``config.yaml`` loads on any machine. What touches the machine (the env's
import path, ``env.tasks``, model directories, CUDA, reward functions) is checked by
:func:`turnrl.run.preflight.preflight` when a command starts, with the same one-line errors.

The schema's defaults serve a pretrained model: ``model.name=smollm2``, no SFT, a fine-tuning
learning rate, the env's own default tasks. The default run is the one exception: with no
recipe, no config file and no override that picks the model or the env (``model.name=...``,
``env.name=...``), the recipe ``code-tiny`` applies (the tiny model on the code env). So
``turnrl train`` and ``turnrl train steps=3`` run code-tiny, while
``turnrl train env.name=tools`` starts from the schema's defaults (smollm2 on the tools env).

Where work runs is one key per part: ``rollout.workers`` (the episodes: this process or Ray
actors), ``max_staleness`` (0: synchronous; N: sampling may run N versions ahead),
``rollout.sampler`` (hf or vllm) and ``trainer.strategy`` (the training processes). The keys
they replaced (``mode``, ``rollout.backend``, ``distributed.*``) are refused, each in one line
naming its successor; in a run's own saved ``config.yaml`` they are translated
(:func:`upgrade_saved`), so older runs still resume, evaluate and export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from turnrl.rollout.context import ContextConfig
from turnrl.run.models import MODELS, named_model
from turnrl.tiny import TinyConfig

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
DEFAULT_RECIPE = "code-tiny"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Strict):
    # a named model (turnrl.run.models: smollm2, tiny) or a transformers path (a local
    # directory or a hub id)
    name: str = "smollm2"
    # where and in what precision the sampler and trainer hold the model: auto = cuda with
    # bfloat16 where a GPU is visible, else cpu with float32
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    # auto, cpu, cuda or cuda:N (that GPU: a trainer apart from vLLM, which takes cuda:0)
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    trust_remote_code: bool = False  # run the model repository's own Python code
    lora: bool = False  # train LoRA adapters on a pretrained model (peft), not all its weights
    lora_rank: int = Field(8, ge=1)  # the adapters' rank r
    lora_alpha: float = 16.0  # the adapters' scale is alpha / r
    lora_targets: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]  # modules that get one
    # how the model writes tool calls; auto reads the family from its chat template
    tool_format: Literal["auto", "hermes", "llama3", "mistral", "json"] = "auto"


class EnvConfig(Strict):
    # a shipped env (`turnrl envs`), an installed package's `turnrl.envs` entry point, or an
    # import path pkg.module:Class; the run records the import path an entry point resolves to
    name: str = "code"
    # the directory env.name's module is imported from when it is not installed: recorded at
    # run start for a module found in the working directory, so eval, --resume and export
    # find it from any directory
    path: str | None = None
    options: dict[str, Any] = {}  # passed to the env family; its own defaults fill the rest
    # FILE.jsonl (or a `datasets` name/directory): the tasks, instead of the env's own; a file
    # is recorded by its absolute path
    tasks: str | None = None
    train_tasks: int | None = Field(None, ge=1)  # None = all
    eval_tasks: int = Field(40, ge=1)

    @field_validator("name")
    @classmethod
    def _name_shape(cls, name: str) -> str:
        module, sep, attr = name.partition(":")
        if sep and not (module and attr):
            raise ValueError(f"{name!r} is not an import path of the form pkg.module:Class")
        return name


class RolloutConfig(Strict):
    # where episodes run: local (in this process) or ray (Ray actors, each with its own envs
    # and a copy of the weights; settings in the ray section)
    workers: Literal["local", "ray"] = "local"
    # what samples the actions: hf (transformers, the trainer's own weights) or vllm (a GPU
    # engine that receives the trainer's weights every sync_every updates; synchronous, local
    # workers only)
    sampler: Literal["hf", "vllm"] = "hf"
    # vllm: the share of its GPU's memory the engine takes (weights + KV cache). It runs on the
    # first visible GPU; the trainer shares it (model.device=cuda) or has another (cuda:1)
    vllm_gpu_memory: float = Field(0.4, gt=0, lt=1)
    # vllm with model.lora: push the LoRA adapter (vLLM applies it to the frozen base) or the
    # merged full weights (for architectures or target modules vLLM's LoRA does not serve)
    vllm_lora: Literal["adapter", "merged"] = "adapter"
    tasks_per_step: int = Field(4, ge=1)
    group_size: int = Field(8, ge=1)  # episodes per task (one group)
    max_turns: int = Field(6, ge=1)
    max_context_tokens: int = Field(2048, ge=64)
    max_new_tokens: int = Field(96, ge=1)
    max_obs_tokens: int = Field(384, ge=16)
    max_parse_errors: int = Field(3, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    # held-out evaluation: None samples like the rollouts (the policy RL trains, whose
    # success RL raises); 0 decodes greedily (verl's validation default), which hides many
    # of a noisy warm start's mistakes, so before -> after measures less of what RL did
    eval_temperature: float | None = Field(None, ge=0)
    episode_timeout_s: float = Field(300.0, gt=0)
    # a broken env stops the run (docs/faults.md): when more than this share of a step's
    # episodes end in env_error or timeout, env_failure_steps steps in a row, training stops
    # with the first error (1: never); the warm start's expert episodes follow the same share
    env_failure_share: float = Field(0.5, gt=0, le=1)
    env_failure_steps: int = Field(3, ge=1)  # steps in a row past env_failure_share: stop
    max_concurrency: int = Field(64, ge=1)
    batch_wait_s: float = Field(0.05, ge=0)
    # when an episode outgrows its context (docs/context.md): truncate (end it with
    # context_limit), drop_observations (old tool results become a placeholder) or summarize
    # (the policy writes a summary; the episode goes on from the task and the summary). A
    # rewrite starts a new segment, trained on exactly the prefix it was sampled from.
    context: Literal["truncate", "drop_observations", "summarize"] = "truncate"
    context_threshold: int | None = Field(None, ge=1)  # tokens; None: 3/4 of max_context_tokens
    keep_observations: int = Field(1, ge=0)  # drop_observations: the latest tool results kept
    summary_max_tokens: int = Field(128, ge=1)  # summarize: the summary's generation budget
    # summarize: a frozen model writes the summary (smollm2 or a transformers path), an
    # observation with no gradient; None: the policy writes it (sampled and trained)
    summarizer: str | None = None

    @model_validator(mode="after")
    def _context_fits(self) -> RolloutConfig:
        errors = self.context_config().check(self.max_context_tokens)
        if errors:
            raise ValueError("\n".join(f"rollout.{e}" for e in errors))
        return self

    def context_config(self) -> ContextConfig:
        threshold = self.context_threshold or self.max_context_tokens * 3 // 4
        return ContextConfig(
            self.context,
            threshold,
            self.keep_observations,
            self.summary_max_tokens,
            self.summarizer,
        )

    @property
    def held_out_temperature(self) -> float:
        return self.temperature if self.eval_temperature is None else self.eval_temperature


class AlgoConfig(Strict):
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "gigpo", "gae_turn"] = "grpo"
    # None: each estimator's reference convention (population for grpo, sample for gigpo)
    std: Literal["population", "sample"] | None = None
    eps: float = 1e-6
    # Episodes cut by a limit (turns, context, parse errors). mask: they leave the loss; zero:
    # they score 0 (right when the budget is part of the task, as in the default run; masking
    # would make running out the clock free); keep: they keep their grade (right when the
    # grader judges the state the limit left, as the tools env's does: held-out success counts
    # such an episode); bootstrap: critic value (gae_turn). Env errors, timeouts and lost
    # episodes are infrastructure failures: always left out of their group.
    truncation: Literal["mask", "zero", "keep", "bootstrap"] = "zero"
    gamma: float | None = Field(None, ge=0, le=1)  # None: 0.95 for gigpo (its paper), else 1
    lam: float = Field(0.95, ge=0, le=1)
    gigpo_weight: float = 1.0
    gigpo_norm: Literal["mean_std", "mean"] = "mean_std"
    # GiGPO step groups: identical anchor states, or text anchors at least this similar
    anchors: Literal["exact", "similar"] = "exact"
    anchor_similarity: float = Field(0.9, gt=0, le=1)
    eps_low: float = Field(0.2, ge=0)
    eps_high: float = Field(0.28, ge=0)
    dual_clip: float | None = Field(None, gt=1)
    ratio_level: Literal["token", "sequence"] = "token"
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = (
        "token-mean"
    )
    # Dr. GRPO's constant L for seq-mean-token-sum-norm; None: rollout.max_context_tokens
    norm_tokens: int | None = Field(None, ge=1)
    kl_coef: float = Field(0.0, ge=0)
    kl_estimator: Literal["k1", "k3"] = "k3"
    entropy_coef: float = Field(0.0, ge=0)  # a bonus for entropy (0: entropy is only logged)
    is_correction: Literal["none", "tis", "decoupled"] = "none"
    is_level: Literal["token", "sequence"] = "token"
    is_mode: Literal["clamp", "mask"] = "clamp"
    is_cap: float = Field(2.0, gt=0)
    value_coef: float = Field(0.5, ge=0)  # gae_turn: weight of the critic's loss
    value_clip: float | None = Field(None, gt=0)  # gae_turn: PPO value clipping range

    @model_validator(mode="after")
    def _bootstrap_needs_critic(self) -> AlgoConfig:
        if self.truncation == "bootstrap" and self.advantage != "gae_turn":
            raise ValueError("truncation=bootstrap needs a critic: set advantage=gae_turn")
        # checked by value, not by "was it set": a saved config.yaml sets every key
        fields = type(self).model_fields
        critic_keys = {
            k for k in ("value_coef", "value_clip") if getattr(self, k) != fields[k].default
        }
        if critic_keys and self.advantage != "gae_turn":
            raise ValueError(
                f"{', '.join(sorted(critic_keys))}: needs a critic, set advantage=gae_turn"
            )
        return self


class RewardConfig(Strict):
    """How a reward is decided: ``env.grade()`` -> a rubric -> ``trajectory.reward``
    (:func:`turnrl.rewards.pipeline.build_rubric`)."""

    # the env's own grade, and the rewards its steps returned, in the rubric (0: logged only)
    grade_weight: float = 1.0
    # per-turn rewards from what the env measures of its state (env.measure()): measure name ->
    # weight; a turn gets weight x the measure's change over it (potential-based shaping).
    # The tools and user envs measure progress: {progress: 1.0} rewards each step towards the
    # goal, and an episode's shaped rewards sum to its final progress
    shaping: dict[str, float] = {}
    screeners: bool = True  # rule-based episode screeners (test edits, exit calls, grader access)
    zero_flagged: bool = True  # a screened-out episode gets reward 0
    # more rubric members: "package.module:function" -> weight (0 = logged, not rewarded)
    functions: dict[str, float] = {}

    @field_validator("functions")
    @classmethod
    def _functions_shape(cls, functions: dict[str, float]) -> dict[str, float]:
        bad = [p for p in functions if not all(p.partition(":")[::2]) or ":" not in p]
        if bad:
            raise ValueError(
                "; ".join(f"{p!r}: expected an import path 'package.module:function'" for p in bad)
            )
        return functions


class OptimConfig(Strict):
    # full fine-tuning of a pretrained model; with model.lora=true use about 1e-4 (LoRA's
    # adapters start at zero and need a larger step); the tiny recipes set their own
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    minibatch_size: int = Field(32, ge=1)  # trajectories per optimizer step
    micro_batch_size: int = Field(8, ge=1)  # at most this many trajectories per forward/backward
    # and at most this many (padded) tokens per forward/backward; None: no token budget
    micro_batch_tokens: int | None = Field(None, ge=1)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass
    epochs: int = Field(1, ge=1)  # passes over each rollout batch


class SFTConfig(Strict):
    """Supervised warm start on the env's scripted expert before RL (off unless asked)."""

    enabled: bool = False
    episodes: int = Field(160, ge=0)  # scripted demonstrations
    noise: float = Field(0.3, ge=0, le=1)  # per-decision mistake rate of the scripted solver
    epochs: int = Field(4, ge=1)
    lr: float = Field(1e-5, gt=0)  # peak of a one-cycle schedule; full fine-tuning scale
    batch_size: int = Field(8, ge=1)


class SubagentConfig(Strict):
    """A ``delegate(task)`` tool: a frozen model runs its own episode in the env's sub-env and
    its answer returns as an observation (mask 0; see :mod:`turnrl.rollout.subagent`)."""

    enabled: bool = False  # give every env of the run the delegate tool
    # who answers: "snapshot" (a frozen copy of the policy), a local model directory (or
    # smollm2), or an OpenAI-compatible endpoint {base_url, model, api_key_env, timeout, ...}
    model: str | dict[str, Any] = "snapshot"
    refresh_every: int = Field(0, ge=0)  # snapshot: copy the policy again every N steps (0: never)
    temperature: float = Field(1.0, ge=0)  # the subagent's sampling temperature (0: greedy)
    # budgets of one delegated call; a call past one ends with its reason as the observation
    max_turns: int = Field(4, ge=1)
    max_new_tokens: int = Field(64, ge=1)  # per subagent turn
    max_context_tokens: int = Field(1024, ge=64)  # the sub-episode's whole context
    timeout_s: float = Field(60.0, gt=0)  # wall clock of one delegated call
    concurrency: int = Field(8, ge=1)  # sub-episodes running at once, over all episodes

    @field_validator("model")
    @classmethod
    def _model(cls, model: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(model, dict):
            from turnrl.policy.openai import endpoint_chat

            endpoint_chat(model, "subagent.model")  # raises ValueError naming the bad key
        return model

    @model_validator(mode="after")
    def _refresh_needs_snapshot(self) -> SubagentConfig:
        if self.refresh_every and self.model != "snapshot":
            raise ValueError("subagent.refresh_every: only a snapshot of the policy is refreshed")
        return self


class RayConfig(Strict):
    """The Ray actors episodes run in with ``rollout.workers=ray`` (docs/scale-out.md)."""

    address: str | None = None  # an existing Ray cluster; None starts a local one
    num_workers: int = Field(2, ge=1)  # Ray actors running episodes
    num_cpus: int = Field(2, ge=1)  # for the local cluster
    max_retries: int = Field(1, ge=0)  # re-runs of a dead worker's episodes
    max_replacements: int = Field(4, ge=0)  # dead workers replaced by new ones, per run


class TrainerConfig(Strict):
    """How the policy is trained over the processes torchrun starts (docs/scale-out.md)."""

    # auto: none on one process; with more, fsdp2 on CUDA and ddp on CPU
    strategy: Literal["auto", "none", "ddp", "fsdp2"] = "auto"
    # bf16 compute, float32 weights, gradients and optimizer state; auto: bf16 on CUDA only
    mixed_precision: Literal["auto", "none", "bf16"] = "auto"


class LoggingConfig(Strict):
    # trajectory records (turnrl view): whole groups per step, plus every flagged episode
    record_groups: int = Field(1, ge=0)
    records_mb: float = Field(64.0, gt=0)  # cap on trajectories/; older steps are thinned first
    wandb: bool = False  # metrics and trajectory tables to Weights & Biases (WANDB_MODE=offline)
    wandb_project: str = "turnrl"


class TrainConfig(Strict):
    name: str = "run"  # the run directory's name under runs_dir (a suffix is added if taken)
    seed: int = 0  # tasks, episodes, model init and warm start all follow it
    steps: int = Field(8, ge=0)  # RL steps (optimizer passes over one rollout batch each)
    # versions a trajectory may lag behind the weights it is trained on. 0: synchronous, each
    # step's episodes sampled with the current weights; N >= 1: asynchronous, rollouts go on
    # while the trainer updates (a background thread, or the Ray workers)
    max_staleness: int = Field(0, ge=0)
    # asynchronous local rollouts: what an episode in flight does at a weight change
    inflight: Literal["continue_new", "finish_old"] = "continue_new"
    # push weights to the samplers every k updates (sampling lags <= k-1): asynchronous or Ray
    # workers (at most max_staleness + 1), or rollout.sampler=vllm
    sync_every: int = Field(1, ge=1)
    eval_every: int = Field(0, ge=0)  # 0 = only at start and end
    checkpoint_every: int = Field(1, ge=1)  # rewrite checkpoints/last.pt every N steps
    checkpoint_keep_every: int = Field(0, ge=0)  # also keep step-N.pt every N steps (0: none)
    checkpoint_keep: int = Field(3, ge=1)  # the newest step-N.pt files kept
    runs_dir: str = "runs"
    threads: int = Field(2, ge=1)  # torch CPU threads
    model: ModelConfig = ModelConfig()
    env: EnvConfig = EnvConfig()
    rollout: RolloutConfig = RolloutConfig()
    algo: AlgoConfig = AlgoConfig()
    reward: RewardConfig = RewardConfig()
    optim: OptimConfig = OptimConfig()
    sft: SFTConfig = SFTConfig()
    tiny: TinyConfig | None = None  # filled in for model.name=tiny; an error for other models
    ray: RayConfig = RayConfig()
    subagent: SubagentConfig = SubagentConfig()
    trainer: TrainerConfig = TrainerConfig()
    logging: LoggingConfig = LoggingConfig()

    @model_validator(mode="before")
    @classmethod
    def _model_section(cls, data: Any) -> Any:
        """A named model's own settings section (``tiny``) exists exactly when it is used."""
        if not isinstance(data, dict):
            return data
        model = data.get("model")
        default = ModelConfig.model_fields["name"].default
        name = (
            model.get("name", default)
            if isinstance(model, dict)
            else getattr(model, "name", default)
        )
        for key, entry in MODELS.items():
            if entry.settings is None:
                continue
            if name == key and data.get(key) is None:
                data = {**data, key: {}}
            elif name != key and data.get(key) is not None:
                raise ValueError(f"{key}: settings of the {key} model, but model.name is {name!r}")
        return data

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """Keys of earlier versions, refused with the one that replaces each (a run's saved
        config.yaml is translated instead: :func:`upgrade_saved`)."""
        if not isinstance(data, dict):
            return data
        lines = [
            f"{key}: {hint}" for key, hint in MOVED.items() if _lookup(data, key) is not _MISSING
        ]
        old = data.get("distributed")
        if isinstance(old, dict):
            lines += [f"distributed.{k}: renamed ray.{k}" for k in old if k != "backend"]
        if lines:
            raise ValueError("\n".join(lines))
        return data

    @model_validator(mode="after")
    def _fits_together(self) -> TrainConfig:
        """Options that act only together with others, all reported at once."""
        r, problems = self.rollout, []
        local_async = r.workers == "local" and self.max_staleness > 0
        if r.sampler == "vllm":
            if r.workers != "local" or self.max_staleness:
                problems.append(
                    "rollout.sampler=vllm: only with rollout.workers=local and max_staleness=0"
                )
            if "is_correction" not in self.algo.model_fields_set:
                # vLLM's kernels differ from the trainer's: correct for the mismatch by default
                self.algo.is_correction = "tis"
            problems += self._vllm_placement()
        elif self.sync_every > self.max_staleness + 1:
            # (vllm is synchronous: its lag is at most sync_every - 1 by construction)
            problems.append(
                f"sync_every={self.sync_every} must be <= max_staleness + 1 = "
                f"{self.max_staleness + 1} (older weights would exceed the bound)"
            )
        only = {  # key -> (where it acts, what it needs)
            "inflight": (local_async, "asynchronous local rollouts (max_staleness >= 1)"),
            "rollout.vllm_gpu_memory": (r.sampler == "vllm", "rollout.sampler=vllm"),
            "rollout.vllm_lora": (
                r.sampler == "vllm" and self.model.lora,
                "model.lora=true and rollout.sampler=vllm",
            ),
            "subagent.enabled": (r.workers == "local", "rollout.workers=local"),
            **{
                f"ray.{k}": (r.workers == "ray", "rollout.workers=ray")
                for k in RayConfig.model_fields
            },
        }
        problems += [
            f"{key}: only with {needs}"
            for key, (acts, needs) in only.items()
            if not acts and _changed(self, key)
        ]
        if self.model.lora and named_model(self.model.name).from_scratch:
            problems.append(
                f"model.lora: the {self.model.name} model trains all its weights (LoRA is for a "
                "pretrained model)"
            )
        if self.optim.micro_batch_size > self.optim.minibatch_size:
            problems.append("optim.micro_batch_size must not exceed optim.minibatch_size")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _vllm_placement(self) -> list[str]:
        """What one process cannot place: vLLM runs on the first visible GPU (cuda:0)."""
        device, r, problems = self.model.device, self.rollout, []
        if self.model.lora and r.vllm_lora == "adapter":
            from turnrl.policy.vllm import vllm_lora_rank

            try:
                vllm_lora_rank(self.model.lora_rank)  # raises past vLLM's largest rank
            except ValueError as e:
                problems.append(str(e))
        if device in ("auto", "cuda", "cuda:0") and r.vllm_gpu_memory > 0.9:
            problems.append(
                f"rollout.vllm_gpu_memory={r.vllm_gpu_memory}: the trainer shares cuda:0 with "
                "vLLM and would keep under 10% of it; lower it, or train on another GPU "
                "(model.device=cuda:1)"
            )
        if device not in ("auto", "cpu", "cuda", "cuda:0") and self.trainer.strategy == "fsdp2":
            problems.append(
                f"model.device={device} with trainer.strategy=fsdp2: FSDP2 shards onto GPU "
                "LOCAL_RANK (cuda:0 here, vLLM's); use trainer.strategy=none on another GPU"
            )
        return problems


# Keys of earlier versions -> what replaces them (refused in user input, translated in a saved
# run's config.yaml by upgrade_saved).
MOVED = {
    "mode": "removed; asynchronous rollouts are max_staleness=N (N >= 1; 0 is synchronous)",
    "rollout.backend": "renamed rollout.sampler (hf or vllm)",
    "distributed.backend": "renamed rollout.workers (local or ray)",
    "env.options.progress_reward": "moved to the rubric: reward.shaping={progress: 1.0}",
}
_MISSING = object()


def _lookup(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def upgrade_saved(data: dict[str, Any]) -> dict[str, Any]:
    """A run's saved config.yaml written by an earlier version, in today's keys: ``mode`` ->
    ``max_staleness`` (0 when it was sync), ``rollout.backend`` -> ``rollout.sampler``,
    ``distributed.backend`` -> ``rollout.workers``, ``distributed.*`` -> ``ray.*``,
    ``env.options.progress_reward`` -> ``reward.shaping``."""
    data = dict(data)
    env = dict(data.get("env") or {})
    options = dict(env.get("options") or {})
    if "progress_reward" in options:
        if options.pop("progress_reward"):
            data["reward"] = {**(data.get("reward") or {}), "shaping": {"progress": 1.0}}
        data["env"] = {**env, "options": options}
    rollout = dict(data.get("rollout") or {})
    if "mode" in data:
        if data.pop("mode") == "sync":
            data["max_staleness"] = 0
    if "backend" in rollout:
        rollout["sampler"] = rollout.pop("backend")
    old = data.pop("distributed", None)
    if isinstance(old, dict):
        old = dict(old)
        if "backend" in old:
            rollout["workers"] = old.pop("backend")
        data["ray"] = {**old, **(data.get("ray") or {})}
    if rollout:
        data["rollout"] = rollout
    return data


def _changed(section: BaseModel, key: str) -> bool:
    """The dotted key differs from its default (set on purpose: a run's saved config.yaml lists
    every key, so being present says nothing)."""
    *parents, leaf = key.split(".")
    for part in parents:
        section = getattr(section, part)
    return getattr(section, leaf) != type(section).model_fields[leaf].default


class ConfigError(ValueError):
    """Every problem with a config, one per line, each naming its field."""


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES.glob("*.yaml"))


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> ``{"a": {"b": 1}, "c": "x"}``; values are parsed as YAML."""
    out: dict[str, Any] = {}
    problems = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            problems.append(f"{item!r}: expected key=value")
            continue
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as e:
            problems.append(
                f"{item!r}: the value is not valid YAML ({yaml_problem(e)}); fix it, or "
                "quote a string value"
            )
            continue
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                problems.append(f"{key}: conflicts with another override")
                break
        else:
            node[leaf] = value
    if problems:
        raise ConfigError("\n".join(problems))
    return out


def yaml_problem(e: yaml.YAMLError) -> str:
    """One line for a YAML error: its position and what is wrong (PyYAML's own text names
    the "<unicode string>" it parsed and quotes the source over several lines)."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + problem


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "options":
            out[k] = merge(out[k], v)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


def _picks_model_or_env(overrides: dict[str, Any]) -> bool:
    return any(
        isinstance(overrides.get(section), dict) and "name" in overrides[section]
        for section in ("model", "env")
    )


def load_config(
    config_file: str | Path | None = None, overrides: list[str] = (), *, saved: bool = False
) -> TrainConfig:
    """Resolve recipe + file + overrides into a validated TrainConfig (or raise ConfigError).
    ``saved``: the file is a run's own config.yaml, written by any version (its keys of earlier
    versions are translated: :func:`upgrade_saved`)."""
    data: dict[str, Any] = {}
    cli = parse_overrides(list(overrides))
    recipe = cli.pop("recipe", None)
    if config_file is not None:
        if not Path(config_file).is_file():
            raise ConfigError(f"--config {config_file}: no such file")
        try:
            loaded = yaml.safe_load(Path(config_file).read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{config_file}: not valid YAML: {yaml_problem(e)}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{config_file}: top level must be a mapping")
        recipe = loaded.pop("recipe", None) if recipe is None else recipe
        data = upgrade_saved(loaded) if saved else loaded
    if recipe is None and config_file is None and not _picks_model_or_env(cli):
        recipe = DEFAULT_RECIPE  # the default run (see the module docstring)
    if recipe is not None:
        path = RECIPES / f"{recipe}.yaml"
        if not path.exists():
            raise ConfigError(
                f"recipe: unknown recipe {recipe!r}; available: {', '.join(recipe_names())}"
            )
        data = merge(yaml.safe_load(path.read_text()) or {}, data)
    data = merge(data, cli)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "config"
            if err["type"] == "value_error":  # our own message: it names what it got
                msg = str(err.get("ctx", {}).get("error", err["msg"]))
                lines += [
                    line if line.startswith(loc) or loc == "config" else f"{loc}: {line}"
                    for line in msg.splitlines()
                ]
                continue
            lines.append(
                f"{loc}: {err['msg']}"
                + (
                    f" (got {err['input']!r})"
                    if err["type"] != "missing" and not isinstance(err.get("input"), dict)
                    else ""
                )
            )
        raise ConfigError("\n".join(lines)) from None
