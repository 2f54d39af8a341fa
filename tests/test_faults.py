"""Fault injection: a hanging or raising tool, killed Ray workers, resumes (Ray, async, after a
SIGKILL before the first checkpoint), torn metrics files, and every bad input a user may type,
each answered by one clear line and the right exit code with nothing left on disk."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
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
    # the warnings checked here go through the "turnrl" logger, which a library configuring
    # logging in the same process (import-linter in test_layers) may have disabled
    monkeypatch.setattr(logging.getLogger("turnrl"), "disabled", False)


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
    assert trajs[0].error == "episode wall-clock limit (2 s) reached in tool 'work' (env slow)"
    assert wall < 15  # the episode timeout fired; the hung thread did not hold the run
    # The hung call's thread cannot be killed: it is counted as stuck until it returns.
    assert blocking_tool_stats()["env/stuck_threads"] >= stuck_before + 1
    # A per-call cap ends the episode sooner, naming the tool.
    trajs, _ = play(loop_parts, CappedEnv, [60.0, 0.0], timeout_s=30.0)
    assert trajs[0].termination is TerminationReason.TIMEOUT
    assert trajs[0].error == "tool 'work' ran past tool_timeout_s=0.5"
    assert trajs[1].termination is TerminationReason.DONE


class AsyncBlockingEnv(SlowEnv):
    """``work`` is an ``async def`` that blocks in ``time.sleep``: common in user code, it used to
    freeze the event loop of every episode (and the episode timeout with it)."""

    name = "asyncblock"

    async def work(self) -> ToolOutput:
        """Work (a blocking call inside async def)."""
        time.sleep(self.sleep)
        return ToolOutput("done", done=True)


def test_blocking_call_inside_async_tool_ends_its_episode_and_is_named(
    loop_parts, monkeypatch, caplog
):
    import turnrl.envs.guard as guard

    monkeypatch.setattr(guard, "STALL_S", 1.0)
    trajs, wall = play(loop_parts, AsyncBlockingEnv, [30.0, 0.0, 0.0, 0.0], timeout_s=8.0)
    assert [t.termination for t in trajs] == [TerminationReason.TIMEOUT] + 3 * [
        TerminationReason.DONE
    ]
    assert trajs[0].error == (
        "episode wall-clock limit (8 s) reached in tool 'work' (env asyncblock)"
    )
    assert wall < 15  # the other episodes and the clock went on
    stalls = [r.message for r in caplog.records if "has not run" in r.message]
    assert len(stalls) == 1, stalls  # one line per stall
    assert stalls[0].startswith(
        "warning: env asyncblock: tool 'work': the event loop has not run for 1 s; its thread "
        f"is at {__file__}:"
    )
    assert "in work (a blocking call in env code: inside async def, make the method" in stalls[0]
    assert blocking_tool_stats()["env/stuck_threads"] >= 1  # until its sleep ends


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


# -- user code that blocks or raises, through `turnrl train` ---------------------------------

FLAKY_ENV = '''
import os
import time

from turnrl.envs.base import ToolEnv, ToolOutput
from turnrl.envs.registry import EnvClassFamily
from turnrl.types import RewardResult


class FlakyEnv(ToolEnv):
    """A user env whose ``async def reset`` does what the task says: "block" blocks in
    time.sleep (a blocking call inside async def), "ok" works. With FLAKY_RAISE_AFTER=N every
    reset after the process's N-th raises; with FLAKY_BLOCK_AFTER=N every one blocks."""

    name = "flaky"
    tools = ("done",)
    resets = 0

    @classmethod
    def tasks(cls, split, n=None, seed=0):
        modes = os.environ.get("FLAKY_TRAIN" if split == "train" else "FLAKY_TEST", "ok,ok,ok,ok")
        return [{"mode": m} for m in modes.split(",")][:n]

    async def reset(self, task):
        FlakyEnv.resets += 1
        if FlakyEnv.resets > int(os.environ.get("FLAKY_RAISE_AFTER", "1000000")):
            raise ValueError("the task store is down")
        if task.payload["mode"] == "block" or FlakyEnv.resets > int(
            os.environ.get("FLAKY_BLOCK_AFTER", "1000000")
        ):
            time.sleep(float(os.environ.get("FLAKY_BLOCK_S", "30")))
        self.instructions = "Call done."
        return "Go."

    def done(self) -> ToolOutput:
        """Finish."""
        return ToolOutput("ok", done=True)

    async def grade(self):
        return RewardResult(0.0, False)


class SlowCloseFamily(EnvClassFamily):
    """FlakyEnv's family, whose close blocks for an hour (a user family's clean-up that hangs)."""

    def __init__(self):
        super().__init__(FlakyEnv, {})

    def close(self):
        if FlakyEnv.resets:  # the run's family (the command line's check builds one first)
            time.sleep(3600)
'''

USER_RUN = [
    "model.name=tiny",
    "sft.enabled=false",
    "sft.episodes=4",
    "tiny.vocab_size=300",
    "tiny.hidden_size=32",
    "tiny.layers=1",
    "env.eval_tasks=4",
    "rollout.tasks_per_step=2",
    "rollout.group_size=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=8",
    "rollout.max_context_tokens=512",
    "optim.minibatch_size=4",
    "optim.micro_batch_size=4",
    "threads=1",
    "name=flaky",
]


def start_user_run(tmp_path: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``turnrl train --quiet`` on FlakyEnv in ``tmp_path`` (plain lines, stdout and stderr
    apart)."""
    (tmp_path / "flaky_env.py").write_text(FLAKY_ENV)
    cmd = [sys.executable, "-m", "turnrl.cli", "train", "--quiet", *USER_RUN, *args]
    full_env = {**os.environ, "TURNRL_CACHE": str(tmp_path / "cache"), **env}
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen, stream, text: str, timeout_s: float) -> list[str]:
    """Lines of ``stream`` read until one contains ``text`` (the process is killed if none
    comes within ``timeout_s``)."""
    seen: list[str] = []
    timer = threading.Timer(timeout_s, proc.kill)  # readline would wait for ever
    timer.start()
    try:
        for line in stream:
            seen.append(line)
            if text in line:
                return seen
    finally:
        timer.cancel()
    raise AssertionError(f"no line with {text!r} in {timeout_s} s: {''.join(seen)[-3000:]}")


@pytest.mark.slow
def test_train_goes_on_past_a_reset_that_blocks_inside_async_def(tmp_path):
    proc = start_user_run(
        tmp_path,
        ["env.name=flaky_env:FlakyEnv", "steps=1", "rollout.episode_timeout_s=8"],
        {"FLAKY_TRAIN": "ok,block", "FLAKY_BLOCK_S": "30"},
    )
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    # the warm start read every task's first turn: the blocked reset is left out, and named
    assert "warning: warm start: 1 of 2 resets ended early (1 timeout) and are left out; " in out
    assert "episode wall-clock limit (8 s) reached in reset (env flaky)" in out
    stall = [ln for ln in err.splitlines() if "has not run" in ln][0]
    assert stall.startswith("warning: env flaky: reset: the event loop has not run for 5 s; its ")
    assert f"{tmp_path / 'flaky_env.py'}:" in stall and "in reset (a blocking call" in stall
    assert "warning: step 1: 2/4 episodes ended early (2 timeout)" in out
    rows = rows_of(tmp_path / "runs" / "flaky")
    assert keys_of(rows) == [(0, "eval"), (1, "train"), (1, "eval")]
    assert rows[1]["termination/timeout"] == 0.5


@pytest.mark.slow
def test_first_ctrl_c_stops_a_run_whose_env_blocks_its_loop(tmp_path):
    # after the warm start (2 resets) and the step-0 evaluation (4), every reset blocks an hour
    proc = start_user_run(
        tmp_path,
        ["env.name=flaky_env:FlakyEnv", "steps=5", "rollout.episode_timeout_s=3000"],
        {"FLAKY_TRAIN": "ok,ok", "FLAKY_BLOCK_AFTER": "6", "FLAKY_BLOCK_S": "3600"},
    )
    try:
        wait_for_line(proc, proc.stderr, "has not run", 300)  # step 1's resets block
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
        stopped_in = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert stopped_in < 10, stopped_in
    run_dir = tmp_path / "runs" / "flaky"
    assert err.splitlines()[-2:] == [
        "interrupted",
        f"no checkpoint yet; start over with: turnrl train --resume {Path('runs') / 'flaky'}",
    ]
    assert (run_dir / "config.yaml").exists()


@pytest.mark.slow
def test_second_ctrl_c_stops_at_once(tmp_path):
    """The first Ctrl-C stops the rollout, then the family's close hangs: the second ends it."""
    proc = start_user_run(
        tmp_path,
        ["env.name=flaky_env:SlowCloseFamily", "steps=5", "rollout.episode_timeout_s=3000"],
        {"FLAKY_TRAIN": "ok,ok", "FLAKY_BLOCK_AFTER": "6", "FLAKY_BLOCK_S": "3600"},
    )
    try:
        wait_for_line(proc, proc.stderr, "has not run", 300)
        proc.send_signal(signal.SIGINT)
        time.sleep(3)
        assert proc.poll() is None  # held by the family's close
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=30)
        stopped_in = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == 130 and stopped_in < 5, (proc.returncode, stopped_in, err)
    assert err.splitlines()[-1] == (
        "interrupted again: stopped at once; continue with: turnrl train --resume "
        f"{Path('runs') / 'flaky'}"
    )


@pytest.mark.slow
def test_an_env_whose_reset_always_raises_stops_the_run_which_resumes_once_fixed(tmp_path):
    # the warm start (2 resets) and the step-0 evaluation (4) work; then every reset raises
    args = ["env.name=flaky_env:FlakyEnv", "steps=4", "rollout.env_failure_steps=2"]
    proc = start_user_run(tmp_path, args, {"FLAKY_TRAIN": "ok,ok", "FLAKY_RAISE_AFTER": "6"})
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    run = Path("runs") / "flaky"
    assert err.splitlines()[-2:] == [
        "error: env flaky failed in most episodes of 2 steps in a row (steps 1-2: 4/4, 4/4 ended "
        "in env_error or timeout; rollout.env_failure_share=0.5); first: ValueError: the task "
        "store is down (reset of env flaky, at flaky_env.py:27 in reset)",
        f"the last checkpoint is step 2 of 4; continue with: turnrl train --resume {run}",
    ]
    rows = rows_of(tmp_path / run)
    assert keys_of(rows) == [(0, "eval"), (1, "train"), (2, "train")]
    assert rows[1]["termination/env_error"] == 1.0
    # fixed (the variable gone), the run resumes from its checkpoint and ends
    done = subprocess.run(
        [sys.executable, "-m", "turnrl.cli", "train", "--quiet", "--resume", str(run)],
        cwd=tmp_path,
        env={**os.environ, "TURNRL_CACHE": str(tmp_path / "cache"), "FLAKY_TRAIN": "ok,ok"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = rows_of(tmp_path / run)
    assert keys_of(rows) == [(0, "eval"), (1, "train"), (2, "train")] + [
        (3, "train"),
        (4, "train"),
        (4, "eval"),
    ]
    assert rows[-1]["eval/ending/env_error"] == 0 and rows[0]["eval/ending/env_error"] == 0


# -- the warm start's expert, the doctor: the same protection ---------------------------------


class FlakyExpert:
    """A scripted agent that raises, hangs, or plays ``agent``'s moves."""

    def __init__(self, agent, what: str | None) -> None:
        self.agent, self.what = agent, what

    def act(self, observation: str):
        if self.what == "raise":
            raise RuntimeError("the expert lost its notes")
        if self.what == "hang":
            time.sleep(30)
        return self.agent.act(observation)


def flaky_experts(monkeypatch, what) -> None:
    """GuessFamily's expert of seed s does ``what(s)``."""
    from turnrl.envs.guess import GuessFamily

    real = GuessFamily.expert

    def expert(self, task, seed=0, noise=0.0):
        return FlakyExpert(real(self, task, seed, noise), what(seed))

    monkeypatch.setattr(GuessFamily, "expert", expert)


WARM = ["sft.episodes=16", "sft.epochs=1", "rollout.episode_timeout_s=3", "steps=0"]


def test_warm_start_leaves_out_expert_episodes_that_raise_or_hang(tmp_path, monkeypatch):
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path / "cache"))  # the expert plays now
    flaky_experts(monkeypatch, lambda seed: {4: "raise", 9: "hang"}.get(seed))
    logs: list[str] = []
    t0 = time.monotonic()
    quiet_train(FAST + [f"runs_dir={tmp_path}", *WARM], logs=logs)
    assert time.monotonic() - t0 < 120  # the hung expert waited its episode's 3 s, no more
    left_out = [ln for ln in logs if ln.startswith("warning: warm start:")]
    assert left_out == [
        "warning: warm start: 2 of 16 expert episodes ended early (1 env_error, 1 timeout) and "
        "are left out; first: RuntimeError: the expert lost its notes (the scripted agent's act "
        f"of env guess, at {Path(__file__).relative_to(Path.cwd())}:"
        f"{FlakyExpert.act.__code__.co_firstlineno + 2} in act)"
    ]
    assert any(ln.startswith("warm start: SFT on 14 demonstrations") for ln in logs)


def test_warm_start_of_an_env_whose_expert_always_fails_stops_before_training(
    tmp_path, monkeypatch
):
    from turnrl.train.failures import BrokenEnv

    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path / "cache"))
    flaky_experts(monkeypatch, lambda seed: "raise")
    with pytest.raises(BrokenEnv) as e:
        quiet_train(FAST + [f"runs_dir={tmp_path}", *WARM])
    assert str(e.value).startswith(
        "warm start: env guess failed in 16 of 16 expert episodes (16 env_error; "
        "rollout.env_failure_share=0.5); first: RuntimeError: the expert lost its notes"
    )


def test_doctor_names_a_call_that_blocks_and_returns(tmp_path, monkeypatch):
    import turnrl.envs.doctor as doctor

    monkeypatch.setattr(doctor, "CALL_TIMEOUT_S", 2.0)
    (tmp_path / "flaky_env.py").write_text(FLAKY_ENV)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLAKY_TRAIN", "ok,block")
    monkeypatch.setenv("FLAKY_BLOCK_S", "20")
    t0 = time.monotonic()
    checks = {c.name: c for c in doctor.run_doctor("flaky_env:FlakyEnv", {}, None, 2, 4, 0)}
    assert time.monotonic() - t0 < 60
    contract = checks["reset/step/grade contract"]
    assert contract.ok is False
    assert contract.detail.startswith(
        f"do-nothing on flaky-train-0-1: reset did not return within 2 s (its thread is at "
        f"{tmp_path / 'flaky_env.py'}:31 in reset)"
    )
    assert checks["grade never raises"].ok  # no grade was queued behind the stuck reset


# -- torn and cut run files: resume, report, view and export read through them ----------------


@pytest.mark.slow
def test_torn_or_cut_run_files_are_read_up_to_the_tear_everywhere(tmp_path, caplog):
    run_dir = quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=2"])
    torn = {
        "metrics.jsonl": '{"step": 3, "reward/me',
        "samples.jsonl": '{"step": 3, "task_',
        "episodes.jsonl": '{"step": 3, "i": 0, "ta',
    }
    for name, tail in torn.items():  # a kill mid-write of each append-only file
        with (run_dir / name).open("a") as f:
            f.write(tail)
    gz = run_dir / "trajectories" / "step-00000002.jsonl.gz"
    whole = gz.read_bytes()
    gz.write_bytes(whole[: len(whole) // 2])  # a cut compressed record file
    for args in (
        ["report", str(run_dir)],
        ["view", str(run_dir), "--export", str(tmp_path / "page.html")],
        ["export", str(run_dir), str(tmp_path / "model")],
    ):
        caplog.clear()
        out = runner.invoke(app, args)
        assert out.exit_code == 0, (args, out.output)
        if args[0] != "export":  # export copies the policy and reads no record
            warned = caplog.text
            assert f"warning: {run_dir / 'metrics.jsonl'}: dropped a torn last line" in warned
            assert f"warning: {run_dir / 'episodes.jsonl'}: dropped a torn last line" in warned
            assert f"warning: {gz}: the file is cut short (a kill or a failed copy)" in warned
    assert (tmp_path / "model" / "config.json").exists()
    quiet_train(["steps=3"], resume=run_dir)
    rows = rows_of(run_dir)
    assert keys_of(rows) == [(0, "eval"), (1, "train"), (2, "train"), (2, "eval")] + [
        (3, "train"),
        (3, "eval"),
    ]
    samples = [s["step"] for s in read_jsonl(run_dir / "samples.jsonl")]
    assert samples == [0] * 3 + [1] * 2 + [2] * 2 + [2] * 3 + [3] * 2 + [3] * 3
    episodes = [r["step"] for r in read_jsonl(run_dir / "episodes.jsonl")]
    assert episodes == [1] * 8 + [2] * 8 + [3] * 8
    assert not list(run_dir.rglob("*.tmp*"))


@pytest.mark.slow
def test_an_evaluation_a_kill_cut_between_samples_and_row_is_run_again_whole(tmp_path):
    run_dir = quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=1"])
    # as a kill leaves it after the final evaluation's samples, before its row (the commit)
    mfile = run_dir / "metrics.jsonl"
    mfile.write_text("".join(ln + "\n" for ln in mfile.read_text().splitlines()[:-1]))
    assert keys_of(rows_of(run_dir)) == [(0, "eval"), (1, "train")]
    quiet_train([], resume=run_dir)
    assert keys_of(rows_of(run_dir)) == [(0, "eval"), (1, "train"), (1, "eval")]
    samples = [(s["step"], bool(s.get("eval"))) for s in read_jsonl(run_dir / "samples.jsonl")]
    assert samples == [(0, True)] * 3 + [(1, False)] * 2 + [(1, True)] * 3  # none twice


# -- a full disk, a read-only disk: each writer names the file and leaves nothing half-done ----


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs (root can mount one; elsewhere the test cannot make a disk fill up)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64M", "tmpfs", str(disk)])
    if mount.returncode != 0:
        pytest.skip("needs permission to mount a tmpfs")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> None:
    """Use up every free byte of ``disk``."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for chunk in (1 << 20, 4096, 1):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name)


def writers(loop_parts):
    """Each file a run writes, by its writer: (name, the path it writes, write())."""
    import torch

    from turnrl.train.checkpoint import save_checkpoint
    from turnrl.train.export import save_policy
    from turnrl.train.metrics import MetricsWriter, count_resume
    from turnrl.view.export import export_html
    from turnrl.view.records import RecordWriter

    policy, renderer = loop_parts
    model, tok = policy.model, renderer.tokenizer
    traj = play(loop_parts, SlowEnv, [0.0, 0.0], timeout_s=30)[0]
    opt = torch.optim.AdamW(model.parameters())

    def metrics(run):
        w = MetricsWriter(run, resume_step=None) if not (run / "metrics.jsonl").exists() else None
        w = w or MetricsWriter(run, resume_step=5)
        w.write({"step": 1, "reward/mean": 0.5}, traj[:1], renderer)
        w.close()

    def records(run):
        w = RecordWriter(run, record_groups=2, records_mb=8, token_text=str, truncate_from=9)
        w.write(1, traj)

    return [
        ("metrics.jsonl", metrics),
        ("trajectories/step-00000001.jsonl.gz", records),
        ("resumes", count_resume),
        ("checkpoints/last.pt", lambda run: save_checkpoint(
            run / "checkpoints" / "last.pt", step=1, version=1, model=model, optimizer=opt
        )),
        ("model", lambda run: save_policy(run, model, tok, "tiny", 1)),
        ("report.html", lambda run: export_html([run], run / "report.html")),
    ]  # fmt: skip


@pytest.mark.slow
def test_disk_full_at_each_writer_names_the_file_and_keeps_the_old_one(
    small_disk, loop_parts, caplog
):
    from turnrl.cli import explain

    run = small_disk / "run"
    run.mkdir()
    for _, write in writers(loop_parts):
        write(run)  # a first version, on a disk with room
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    fill(small_disk)
    for name, write in writers(loop_parts):
        with pytest.raises(Exception) as e:
            write(run)
        code, lines = explain(e.value)
        assert code == 1, (name, lines)
        if name == "checkpoints/last.pt":
            assert lines == [
                f"error: could not write checkpoint {run / name} (No space left on device; 0 "
                "MiB free); last.pt is intact"
            ]
        elif name in ("metrics.jsonl", "trajectories/step-00000001.jsonl.gz"):
            assert lines[0].startswith(f"error: cannot write {run}/"), (name, lines)
            assert lines[0].endswith(": No space left on device (0 MiB free there)"), lines
        else:
            assert lines == [
                f"error: cannot write {run / name}: No space left on device (0 MiB free there)"
            ]
        assert not leftovers(run), (name, leftovers(run))
    for path, data in before.items():  # whole files are as they were; appends kept theirs
        if path.name not in ("metrics.jsonl", "samples.jsonl", "episodes.jsonl"):
            assert path.read_bytes() == data, path
        else:
            assert path.read_bytes().startswith(data), path


@pytest.mark.slow
def test_disk_full_at_the_final_report(tmp_path, small_disk, monkeypatch):
    import turnrl.run.rundir as rundir

    quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=0", "name=warm"])  # cache the SFT model
    real = rundir.export_html

    def full_then_export(runs, out, **kw):
        fill(small_disk)
        return real(runs, out, **kw)

    monkeypatch.setattr(rundir, "export_html", full_then_export)
    stderr = fails(["train", "--quiet", *FAST, f"runs_dir={small_disk}", "steps=1"], code=1)
    run_dir = small_disk / "fast"
    assert stderr.splitlines()[-2:] == [
        f"error: cannot write {run_dir / 'report.html'}: No space left on device (0 MiB free "
        "there)",
        f"all 1 steps are saved; rebuild it with: turnrl report {run_dir}",
    ]
    assert not leftovers(run_dir)
    (small_disk / "filler").unlink()
    monkeypatch.setattr(rundir, "export_html", real)  # room again: the hint's command works
    again = runner.invoke(app, ["report", str(run_dir)])
    assert again.exit_code == 0, again.output


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_disk_that_fills_or_turns_read_only_at_a_checkpoint(
    tmp_path, small_disk, monkeypatch, fault
):
    import torch

    import turnrl.run.rundir as rundir

    quiet_train(FAST + [f"runs_dir={tmp_path}", "steps=0", "name=warm"])  # cache the SFT model
    real, calls = rundir.save_checkpoint, []

    def save(path, **kw):
        calls.append(path)
        if len(calls) == 2:  # the second checkpoint
            if fault == "full":
                fill(small_disk)
            else:
                subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
        return real(path, **kw)

    monkeypatch.setattr(rundir, "save_checkpoint", save)
    run_dir = small_disk / "fast"
    stderr = fails(["train", "--quiet", *FAST, f"runs_dir={small_disk}", "steps=3"], code=1)
    last = run_dir / "checkpoints" / "last.pt"
    cause = "No space left on device; 0" if fault == "full" else "Read-only file system; "
    lines = stderr.splitlines()[-2:]
    assert lines[0].startswith(f"error: could not write checkpoint {last} ({cause}")
    assert lines[0].endswith(" MiB free); last.pt is intact")
    assert lines[1] == (
        f"the last checkpoint is step 1 of 3; continue with: turnrl train --resume {run_dir}"
    )
    assert torch.load(last, weights_only=False)["step"] == 1
    assert not leftovers(run_dir)
    if fault == "read-only":
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)


# -- the command line: -h, unknown options, stderr, and bad input before torch loads ---------

COMMANDS = ["train", "eval", "export", "view", "report", "audit", "envs", "doctor"]


@pytest.mark.parametrize("command", [*COMMANDS, "check-template"])
def test_help_and_unknown_options_on_every_command(command):
    for flag in ("-h", "--help"):
        out = runner.invoke(app, [command, flag])
        assert out.exit_code == 0 and "Usage: turnrl " in out.stdout, out.output
    assert fails([command, "--zzz"]) == (
        f"turnrl {command}: No such option: --zzz (see turnrl {command} -h)\n"
    )


def test_usage_mistakes_are_one_line_with_exit_2():
    assert fails(["--bogus"]) == "turnrl: No such option: --bogus (see turnrl -h)\n"
    assert fails(["bogus"]) == "turnrl: No such command 'bogus'. (see turnrl -h)\n"
    assert fails(["eval", "--k", "x"]) == (
        "turnrl eval: Invalid value for '--k': Input should be a valid integer, unable to parse "
        "string as an integer (see turnrl eval -h)\n"
    )
    out = runner.invoke(app, ["-h"])
    assert out.exit_code == 0 and "train" in out.stdout


BEFORE_TORCH = """
import sys
from turnrl.cli import main
sys.argv = ["turnrl", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    heavy = [m for m in ("torch", "transformers") if m in sys.modules]
    print(e.code, heavy, file=sys.stdout)
"""


@pytest.mark.parametrize(
    "args",
    [
        ["train", "steps=x"],
        ["train", "recipe=guess-tiny", "env.options.low=9", "env.options.high=2"],
        ["train", "env.name=guess", "model.name=/no/such/model"],
        ["eval", "runs/none"],
        ["export", "runs/none", "out"],
        ["train", "--bogus"],
    ],
)
def test_bad_input_is_answered_before_torch_loads(tmp_path, args):
    out = subprocess.run(
        [sys.executable, "-c", BEFORE_TORCH, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout == "2 []\n", (out.stdout, out.stderr)
    assert len(out.stderr.splitlines()) == 1, out.stderr  # one line, never wrapped


# -- training options ------------------------------------------------------------------------


def test_gae_turn_value_head_is_made_where_the_policy_was_placed():
    from transformers import LlamaConfig, LlamaForCausalLM

    from turnrl.train.step import make_critic

    cfg = load_config(None, ["env.name=guess", "algo.advantage=gae_turn"])
    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2,
    )  # fmt: skip
    model = LlamaForCausalLM(config).to("meta")  # a device other than the CPU it is made on
    critic = make_critic(cfg, model)
    assert critic is not None and critic.value_head.weight.device.type == "meta"


def test_a_negative_entropy_coefficient_is_refused():
    assert fails(["train", "env.name=guess", "algo.entropy_coef=-0.01"]) == (
        "config error: algo.entropy_coef: Input should be greater than or equal to 0 (got "
        "-0.01) (nothing was started)\n"
    )
