"""Fault injection: a hanging or raising tool, killed Ray workers, resumes (Ray, async, after a
SIGKILL before the first checkpoint), torn metrics files, and every bad input a user may type,
each answered by one clear line and the right exit code with nothing left on disk."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnrl.chat import ChatRenderer
from turnrl.cli import app
from turnrl.envs.base import ToolEnv, ToolOutput, blocking_tool_stats
from turnrl.policy.hf import HFPolicy
from turnrl.rollout.agent_loop import EpisodeRequest, RolloutLimits, collect, default_sampling
from turnrl.rollout.batcher import GenerationBatcher
from turnrl.run.config import load_config
from turnrl.run.recipe import train
from turnrl.tiny.model import tiny_model, train_tokenizer
from turnrl.train.metrics import read_jsonl
from turnrl.types import RewardResult, Task, TerminationReason, ToolCall

runner = CliRunner()

# A small, learnable guess run: each test trains a few steps in seconds once the SFT warm
# start is cached (one per session, as a user's cache would be).
FAST = [
    "name=fast",
    "model.name=tiny",
    "env.name=guess",
    "env.options={low: 1, high: 8, secret: 5}",
    "env.eval_tasks=8",
    "rollout.tasks_per_step=2",
    "rollout.group_size=4",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=24",
    "rollout.max_context_tokens=512",
    "rollout.episode_timeout_s=30",
    "sft.enabled=true",
    "sft.episodes=128",
    "sft.noise=0.5",
    "sft.epochs=10",
    "sft.lr=0.01",
    "sft.batch_size=16",
    "threads=1",
    "optim.lr=0.0003",
    "optim.minibatch_size=8",
    "optim.micro_batch_size=8",
    "tiny.vocab_size=320",
    "tiny.hidden_size=64",
    "tiny.layers=2",
    "seed=1",
]


@pytest.fixture(scope="session")
def _shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("turnrl-cache")


@pytest.fixture(autouse=True)
def _cache(_shared_cache, monkeypatch):
    monkeypatch.setenv("TURNRL_CACHE", str(_shared_cache))


def quiet_train(args: list[str], resume: Path | None = None, logs: list | None = None) -> Path:
    cfg = load_config(resume / "config.yaml" if resume else None, args)
    sink = logs.append if logs is not None else (lambda s: None)
    return train(cfg, resume_dir=resume, quiet=True, log=sink)


def rows_of(run_dir: Path) -> list[dict]:
    return read_jsonl(run_dir / "metrics.jsonl")


def keys_of(rows: list[dict]) -> list[tuple[int, str]]:
    """(step, kind) of each row: a step's training row and its evaluation row."""
    return [(r["step"], "eval" if "eval/success" in r else "train") for r in rows]


# -- tools: hanging, blocking, raising ---------------------------------------------------------


class AnyText:
    """Every action is one ``work`` call: an untrained model still calls the tool each turn."""

    def parse(self, text: str) -> list[ToolCall]:
        return [ToolCall("work", {})]

    def format(self, calls: list[ToolCall]) -> str:
        return ""


class SlowEnv(ToolEnv):
    """``work`` is a plain method that blocks for the task's ``sleep`` seconds, then ends the
    episode."""

    name = "slow"
    tools = ("work",)

    async def reset(self, task: Task) -> str:
        self.sleep = task.payload["sleep"]
        self.instructions = "Work."
        return "Go."

    def work(self) -> ToolOutput:
        """Work (blocking)."""
        time.sleep(self.sleep)
        return ToolOutput("done", done=True)

    async def grade(self) -> RewardResult:
        return RewardResult(1.0, True)


class CappedEnv(SlowEnv):
    tool_timeout_s = 0.5


@pytest.fixture(scope="module")
def loop_parts():
    tok = train_tokenizer([f"work {i} done go" for i in range(100)], vocab_size=300)
    model = tiny_model(tok, seed=0, hidden_size=32, layers=1)
    renderer = ChatRenderer(tok, AnyText(), "<|im_end|>")
    return HFPolicy(model, tok.pad_token_id), renderer


def play(loop_parts, env_cls, sleeps: list[float], timeout_s: float):
    policy, renderer = loop_parts
    limits = RolloutLimits(max_turns=2, max_new_tokens=4, episode_timeout_s=timeout_s)
    requests = [
        EpisodeRequest(Task(f"t{i}", "slow", {"sleep": s}), f"g{i}", i)
        for i, s in enumerate(sleeps)
    ]

    async def go():
        batcher = GenerationBatcher(policy, default_sampling(renderer), max_wait_s=0.01)
        try:
            return await collect(requests, env_cls, renderer, batcher, limits)
        finally:
            await batcher.close()

    t0 = time.monotonic()
    trajs = asyncio.run(go())
    return trajs, time.monotonic() - t0


def test_hanging_sync_tool_ends_its_episode_with_timeout_and_the_rest_go_on(loop_parts):
    stuck_before = blocking_tool_stats()["env/stuck_threads"]
    trajs, wall = play(loop_parts, SlowEnv, [60.0, 0.0, 0.0, 0.0], timeout_s=2.0)
    assert [t.termination for t in trajs] == [TerminationReason.TIMEOUT] + 3 * [
        TerminationReason.DONE
    ]
    assert trajs[0].error == "episode wall-clock limit reached"
    assert wall < 15  # the episode timeout fired; the hung thread did not hold the run
    # The hung call's thread cannot be killed: it is counted as stuck until it returns.
    assert blocking_tool_stats()["env/stuck_threads"] >= stuck_before + 1
    # A per-call cap ends the episode sooner, naming the tool.
    trajs, _ = play(loop_parts, CappedEnv, [60.0, 0.0], timeout_s=30.0)
    assert trajs[0].termination is TerminationReason.TIMEOUT
    assert trajs[0].error == "tool 'work' ran past tool_timeout_s=0.5"
    assert trajs[1].termination is TerminationReason.DONE


def test_blocking_tools_overlap_across_episodes(loop_parts):
    """16 episodes whose one call blocks 0.5 s: serial on the loop that is 8 s."""
    trajs, wall = play(loop_parts, SlowEnv, [0.5] * 16, timeout_s=60.0)
    assert all(t.termination is TerminationReason.DONE for t in trajs)
    assert wall < 5.0, wall


def test_raising_tool_is_env_error_counted_and_warned(tmp_path, monkeypatch):
    from turnrl.envs.guess import GuessEnv

    quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=0", "name=warm"])  # cache the SFT model

    def broken(self, number: int) -> str:
        raise ZeroDivisionError(f"guess {number} broke the env")

    monkeypatch.setattr(GuessEnv, "guess", broken)
    logs: list[str] = []
    run_dir = quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=1"], logs=logs)
    step = [r for r in rows_of(run_dir) if "reward/mean" in r][0]
    assert step["termination/env_error"] > 0.1 and step["termination/timeout"] == 0.0
    assert sum(v for k, v in step.items() if k.startswith("termination/")) == pytest.approx(1)
    warning = [ln for ln in logs if ln.startswith("warning: step 1:")]
    assert len(warning) == 1 and "env_error" in warning[0]
    assert "first: ZeroDivisionError: guess" in warning[0] and "broke the env" in warning[0]


# -- Ray: a killed worker is replaced; a resumed run keeps its policy version ------------------


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'turnrl[ray]'")
    from tests import test_ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(test_ray)  # its test-local env classes
    yield test_ray
    ray.shutdown()


@pytest.mark.slow
def test_killed_ray_worker_is_replaced_with_a_line(cluster):
    from turnrl.rollout.ray_workers import RayRollouts, WorkerSpec

    tok = train_tokenizer([f"say {i} ok go something" for i in range(200)], vocab_size=300)
    model = tiny_model(tok, seed=0, hidden_size=32, layers=1)
    renderer = ChatRenderer(tok, cluster.AnyText(), "<|im_end|>")
    spec = WorkerSpec(
        make_family=cluster.SayFamily,
        renderer=renderer,
        model=model,
        pad_token_id=tok.pad_token_id,
        params=default_sampling(renderer),
        limits=RolloutLimits(max_turns=3, max_context_tokens=256, max_new_tokens=6),
    )
    policy = HFPolicy(model, tok.pad_token_id)
    policy.version = 7  # as after a resume: the workers must sample at version 7
    logs: list[str] = []
    with RayRollouts(
        cluster.units(delay=0.5),
        spec,
        policy,
        batch_size=4,
        num_workers=2,
        cpus_per_worker=0.5,
        max_replacements=1,
        log=logs.append,
    ) as rollouts:
        first, _ = rollouts.get_batch(0, timeout_s=180)
        old = set(rollouts.worker_pids())
        cluster.kill(rollouts.workers[0])  # unit 1 (slow steps) is in flight on both
        trajs, m = [], {}
        for step in (1, 2, 3):
            cluster.update(policy, rollouts)
            batch, m = rollouts.get_batch(step, timeout_s=180)
            trajs += batch
        new = set(rollouts.worker_pids())
    assert all(v == 7 for t in first for v in t.policy_versions if v >= 0)
    assert m["ray/worker_deaths"] == 1 and m["ray/replaced"] == 1 and m["ray/workers_alive"] == 2
    assert len(new - old) == 1  # one fresh actor process took the dead one's slot
    assert any(t.metrics.get("reward/pid") in new - old for t in trajs)  # and runs episodes
    assert all(t.termination is TerminationReason.DONE for t in trajs)
    assert logs == [
        "ray: rollout worker 0 died (ActorDiedError); replaced by a new one (1/1 replacements used)"
    ]


def _resume_keeps_policy_version(tmp_path: Path, extra: list[str]) -> None:
    args = FAST + [f"runs_dir={tmp_path}", "steps=1", *extra]
    run_dir = quiet_train(args)
    logs: list[str] = []
    quiet_train(["steps=2"], resume=run_dir, logs=logs)
    rows = rows_of(run_dir)
    steps = [r for r in rows if "reward/mean" in r]
    assert keys_of(rows) == [(0, "eval"), (1, "train"), (1, "eval"), (2, "train"), (2, "eval")]
    assert [r["policy_version"] for r in steps] == [1, 2]
    assert [r["run/resumes"] for r in steps] == [0, 1]
    assert all(r["async/dropped"] == 0 for r in steps)  # nothing was stale
    assert any(f"resumed {run_dir} at step 1" in ln for ln in logs)


@pytest.mark.slow
def test_resume_of_a_ray_run(tmp_path, cluster):
    _resume_keeps_policy_version(
        tmp_path, ["rollout.workers=ray", "ray.num_workers=1", "max_staleness=0"]
    )


@pytest.mark.slow
def test_resume_of_an_async_run(tmp_path):
    _resume_keeps_policy_version(tmp_path, ["max_staleness=1"])


# -- append-only files and resumes ---------------------------------------------------------


@pytest.mark.slow
def test_torn_metrics_line_is_dropped_with_a_warning(tmp_path, caplog):
    run_dir = quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=1", "checkpoint_keep=1"])
    mfile = run_dir / "metrics.jsonl"
    whole = mfile.read_text()
    mfile.write_text(whole + '{"step": 2, "reward/me')  # killed mid-write
    out = runner.invoke(app, ["report", str(run_dir)])
    assert out.exit_code == 0, out.output
    assert f"warning: {mfile}: dropped a torn last line" in caplog.text
    quiet_train(["steps=2"], resume=run_dir)
    assert keys_of(rows_of(run_dir)) == [(0, "eval"), (1, "train"), (1, "eval")] + [
        (2, "train"),
        (2, "eval"),
    ]
    assert mfile.read_text().startswith(whole)
    # Anywhere but the tail, a bad line is an error naming the file and the line.
    mfile.write_text('{"step": 0}\n{"st\n{"step": 1}\n')
    out = runner.invoke(app, ["report", str(run_dir)])
    assert out.exit_code == 1
    assert f"{mfile}: line 2 is not JSON" in out.stderr


@pytest.mark.slow
def test_sigkill_before_the_first_checkpoint_leaves_no_duplicate_rows(tmp_path):
    args = FAST + [f"runs_dir={tmp_path}", "steps=3", "checkpoint_every=100"]
    quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=0", "name=warm"])  # cache the SFT model
    cmd = [sys.executable, "-m", "turnrl.cli", "train", "--quiet", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "fast"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        mfile = run_dir / "metrics.jsonl"
        if mfile.exists() and '"reward/mean"' in mfile.read_text():
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "checkpoints" / "last.pt").exists()
    assert (run_dir / "samples.jsonl").read_text()  # the killed run wrote rows and samples
    quiet_train([], resume=run_dir)
    rows = rows_of(run_dir)
    assert keys_of(rows) == [(0, "eval"), (1, "train"), (2, "train"), (3, "train"), (3, "eval")]
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert [s["step"] for s in samples] == [0] * 3 + [1] * 2 + [2] * 2 + [3] * 2 + [3] * 3
    assert [r["run/resumes"] for r in rows if "reward/mean" in r] == [1, 1, 1]


# -- checkpoints --------------------------------------------------------------------------


@pytest.mark.slow
def test_checkpoints_last_every_n_kept_and_best(tmp_path):
    import torch

    args = ["steps=4", "eval_every=1", "checkpoint_keep_every=1", "checkpoint_keep=2"]
    run_dir = quiet_train(FAST + [f"runs_dir={tmp_path}", *args])
    ckpts = run_dir / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == [
        "best.pt",
        "last.pt",
        "step-000003.pt",
        "step-000004.pt",
    ]
    evals = {r["step"]: r["eval/success"] for r in rows_of(run_dir) if "eval/success" in r}
    best = torch.load(ckpts / "best.pt", weights_only=False)
    top = max(v for s, v in evals.items() if s > 0)
    assert best["extra"]["eval/success"] == top
    assert best["step"] == min(s for s, v in evals.items() if s > 0 and v == top)
    assert torch.load(ckpts / "step-000003.pt", weights_only=False)["step"] == 3


# -- bad input: one line, exit 2, nothing on disk -----------------------------------------


def fails(args: list[str], code: int = 2) -> str:
    """The command's stderr, after checking its exit code (and, before any work started,
    that it printed nothing else)."""
    out = runner.invoke(app, args)
    assert out.exit_code == code, (out.exit_code, out.output, out.exception)
    assert code != 2 or out.stdout == ""
    return out.stderr


def test_yaml_syntax_error_names_the_file_and_line(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("steps: 3\nrollout:\n  group_size: [1,\n")
    assert fails(["train", "--config", str(f)]) == (
        f"config error: {f}: not valid YAML: line 4, column 1: expected the node content, "
        "but found '<stream end>' (nothing was started)\n"
    )


def test_missing_config_file(tmp_path):
    assert fails(["train", "--config", str(tmp_path / "nope.yaml")]) == (
        f"config error: --config {tmp_path / 'nope.yaml'}: no such file (nothing was started)\n"
    )


def test_malformed_overrides():
    assert fails(["train", "steps"]) == (
        "config error: 'steps': expected key=value (nothing was started)\n"
    )
    assert fails(["train", "rollout.group_size=[1,"]) == (
        "config error: 'rollout.group_size=[1,': the value is not valid YAML (line 1, column 4: "
        "expected the node content, but found '<stream end>'); fix it, or quote a string "
        "value (nothing was started)\n"
    )


def test_missing_model_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert fails(["train", "env.name=guess", "model.name=/no/such/model"]) == (
        "config error: model.name: /no/such/model is not a model directory (it does not "
        "exist); give a local directory with config.json, a hub id such as org/name, or one "
        "of: tiny, smollm2 (nothing was started)\n"
    )
    assert not (tmp_path / "runs").exists()


def test_eval_of_a_mistyped_run_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "bandit").mkdir(parents=True)
    assert fails(["eval", "runs/bandti"]) == (
        "eval: runs/bandti is neither a run directory (no runs/bandti/config.yaml) nor a model "
        "directory; give a run directory such as runs/NAME, a model directory, tiny or smollm2\n"
    )


def test_resume_of_a_directory_that_is_not_a_run(tmp_path):
    assert fails(["train", "--resume", str(tmp_path)]) == (
        f"--resume {tmp_path}: not a run directory (no config.yaml); give the directory a run "
        "was written to, such as runs/NAME\n"
    )


def test_audit_of_an_env_it_cannot_audit(tmp_path):
    assert fails(["audit", "--env", "tools", "--out", str(tmp_path / "a.json")]) == (
        "audit --env tools: mutation audits need the code env's gold solutions and tests; use "
        "--env code or --env code-weak\n"
    )
    assert not (tmp_path / "a.json").exists()


def test_bad_env_options_leave_no_run_directory(tmp_path):
    runs = tmp_path / "runs"
    base = ["train", "recipe=guess-tiny", f"runs_dir={runs}"]
    assert fails([*base, "env.options.colour=red"]) == (
        "config error: env.options: GuessFamily.__init__() got an unexpected keyword argument "
        "'colour' (nothing was started)\n"
    )
    assert fails([*base, "env.options.low=9", "env.options.high=2"]) == (
        "config error: env.options: guess env: low (9) must be below high (2) (nothing was "
        "started)\n"
    )
    assert not runs.exists()


def test_read_only_runs_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1M", "tmpfs", str(ro)])
    if mount.returncode != 0:
        pytest.skip("needs permission to mount a read-only tmpfs")
    try:
        assert fails(["train", "recipe=guess-tiny", f"runs_dir={ro}"]) == (
            f"error: cannot write {ro / 'guess-tiny'}: Read-only file system; use a writable "
            "directory (for a run: runs_dir=DIR)\n"
        )
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_debug_shows_the_traceback(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("steps: [\n")
    out = runner.invoke(app, ["train", "--config", str(f), "--debug"])
    assert out.exit_code == 1 and type(out.exception).__name__ == "ConfigError"


@pytest.mark.slow
def test_disk_full_at_a_checkpoint_keeps_last_pt(tmp_path, monkeypatch):
    import torch

    quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=0", "name=warm"])  # cache the SFT model
    real_save, saves = torch.save, []

    def save(obj, f, *a, **kw):
        saves.append(f)
        if len(saves) > 1:  # the second checkpoint: the disk is full
            Path(f).write_bytes(b"partial")
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed "
                "writing file data/0: file write failed"
            )
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(torch, "save", save)
    run_dir = tmp_path / "fast"
    stderr = fails(["train", "--quiet", *FAST, f"runs_dir={tmp_path}", "steps=3"], code=1)
    last = run_dir / "checkpoints" / "last.pt"
    free = stderr.split("file write failed; ")[1].split(")")[0]
    assert free.endswith(" MiB free")
    assert stderr.splitlines()[-2:] == [  # after the model loader's progress bars
        f"error: could not write checkpoint {last} (PytorchStreamWriter failed writing file "
        f"data/0: file write failed; {free}); last.pt is intact",
        f"the last checkpoint is step 1 of 3; continue with: turnrl train --resume {run_dir}",
    ]
    monkeypatch.setattr(torch, "save", real_save)
    assert torch.load(last, weights_only=False)["step"] == 1
    assert not last.with_suffix(".tmp").exists()


@pytest.mark.slow
def test_ctrl_c_prints_how_to_resume(tmp_path, monkeypatch):
    import turnrl.run.recipe as loop

    quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=0", "name=warm"])  # cache the SFT model
    real, calls = loop.collate, []

    def collate(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(loop, "collate", collate)
    stderr = fails(["train", "--quiet", *FAST, f"runs_dir={tmp_path}", "steps=3"], code=130)
    assert stderr.splitlines()[-2:] == [
        "interrupted",
        f"the last checkpoint is step 1 of 3; continue with: turnrl train --resume "
        f"{tmp_path / 'fast'}",
    ]
