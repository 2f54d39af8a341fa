"""OpenEnv servers through the real agent loop (``env.name=openenv``): a server written with
OpenEnv's server API (``examples/openenv_counter.py``) started on loopback by the adapter and
stopped at the end; token-exact episodes with SmolLM2's template; the server's own rewards as
the episode's return; a server killed mid-episode, a hung step and a malformed observation
each end only their episode; ``turnrl doctor`` and one ``turnrl train`` step."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("openenv_core", reason="the openenv extra")

from tests.adapters_support import check_token_exact, play_forced, train_one_step  # noqa: E402
from turnrl.cli import app  # noqa: E402
from turnrl.envs.adapters.openenv import OpenEnvFamily  # noqa: E402
from turnrl.run.config import ConfigError, load_config  # noqa: E402
from turnrl.run.preflight import preflight  # noqa: E402
from turnrl.types import TerminationReason, ToolCall  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COUNTER = {"server": "openenv_counter:app", "action": "openenv_counter:CounterAction"}


@pytest.fixture(autouse=True)
def _server_modules(monkeypatch):
    """The example and fixture servers importable here and in the server processes."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fixtures"))


class Climber:
    """Steps towards the target: a detour first (step -1), then as far as 3 at a time."""

    def __init__(self) -> None:
        self.detour = True

    def act(self, observation):
        value = int(re.search(r"value: (-?\d+)", observation).group(1))
        target = int(re.search(r"target: (-?\d+)", observation).group(1))
        if self.detour:
            self.detour = False
            return ToolCall("step", {"step": -1 if target > 0 else 1})
        return ToolCall("step", {"step": max(-3, min(3, target - value))})


def served_alone(url: str, steps: list[int]) -> list[float]:
    """The same actions sent through OpenEnv's own HTTP client: the server's rewards."""
    from openenv_core import HTTPEnvClient, StepResult

    class Client(HTTPEnvClient):
        def _step_payload(self, action):
            return {"step": action}

        def _parse_result(self, payload):
            return StepResult(payload["observation"], payload.get("reward"), payload["done"])

        def _parse_state(self, payload):
            return payload

    client = Client(url)
    client.reset()
    return [client.step(s).reward for s in steps]


def test_episodes_are_token_exact_and_keep_the_servers_rewards():
    family = OpenEnvFamily(**COUNTER, servers=2)
    try:
        tasks = family.tasks("test", 3)
        trajs, backend, renderer = play_forced(family.make_env, tasks, [Climber() for _ in tasks])
        schema = family.make_env().tool_schemas()
        assert schema[0]["function"]["parameters"]["properties"]["step"]["type"] == "integer"
        assert len(family.pool.servers) == 2  # three episodes shared two servers
        for i, traj in enumerate(trajs):
            assert traj.termination is TerminationReason.DONE, traj.error
            check_token_exact(traj, renderer, schema, backend.generations[i])
            assert traj.messages[1]["content"].startswith("value: 0\ntarget: 5\n")
            steps = [t.tool_calls[0].arguments["step"] for t in traj.turns]
            rewards = served_alone(family.pool.servers[0].url, steps)
            assert traj.reward == sum(rewards) == 1.0 and traj.graded.success
            assert traj.graded.components["steps"] == len(steps) == 3
        processes = [s.process for s in family.pool.servers]
    finally:
        family.close()
    assert all(p.poll() is not None for p in processes)  # stopped at the end


def test_a_wrong_action_is_an_observation_not_a_server_error():
    family = OpenEnvFamily(**COUNTER, servers=1)
    try:

        class Wrong(Climber):
            """Three wrong actions, then the climb."""

            def __init__(self):
                super().__init__()
                self.detour = False
                self.wrong = iter([{"step": "up"}, {"steps": 1}, {"step": 5}])

            def act(self, observation):
                if "value:" in observation:  # the last state the env showed
                    self.last = observation
                bad = next(self.wrong, None)
                if bad is not None:
                    return ToolCall("step", bad)
                return super().act(self.last)

        trajs, _, _ = play_forced(family.make_env, family.tasks("train", 1), [Wrong()])
        traj = trajs[0]
        observations = [m["content"] for m in traj.messages if m["role"] == "tool"]
        assert observations[0].startswith("Error: bad action for 'step': step:")
        assert observations[1].startswith("Error: bad action for 'step':")
        assert "outside -3..3" in observations[2]
        assert traj.turns[0].malformed and traj.turns[1].malformed
        assert not traj.turns[2].malformed  # a valid action the env itself refuses
        assert traj.termination is TerminationReason.DONE and traj.reward == 1.0
    finally:
        family.close()


def test_a_server_killed_mid_episode_ends_that_episode_and_is_restarted():
    family = OpenEnvFamily(**COUNTER, servers=1)
    try:

        class Killer(Climber):
            def act(self, observation):
                if not self.detour:
                    family.pool.servers[0].process.kill()
                    family.pool.servers[0].process.wait()
                return super().act(observation)

        tasks = family.tasks("train", 2)
        trajs, _, _ = play_forced(family.make_env, tasks[:1], [Killer()])
        assert trajs[0].termination is TerminationReason.ENV_ERROR and trajs[0].excluded
        assert "ConnectionError" in trajs[0].error
        trajs, _, _ = play_forced(family.make_env, tasks[1:], [Climber()])  # a fresh server
        assert trajs[0].termination is TerminationReason.DONE and trajs[0].reward == 1.0
    finally:
        family.close()


def test_a_hung_step_times_out_and_a_malformed_observation_is_an_env_error():
    family = OpenEnvFamily(
        server="openenv_faulty:app", action="openenv_faulty:FaultAction", servers=3,
        step_timeout_s=1.0,
    )  # fmt: skip
    try:

        class Mode:
            def __init__(self, mode):
                self.mode = mode

            def act(self, observation):
                return ToolCall("step", {"mode": self.mode})

        t0 = time.monotonic()
        trajs, _, _ = play_forced(
            family.make_env, family.tasks("train", 3), [Mode("hang"), Mode("malformed"), Mode("ok")]
        )
        assert time.monotonic() - t0 < 25  # the hung step sleeps 60 s: it was not waited for
        hung, malformed, fine = trajs
        assert hung.termination is TerminationReason.TIMEOUT and hung.excluded
        assert malformed.termination is TerminationReason.ENV_ERROR and malformed.excluded
        assert "done 'yes' is not a boolean" in malformed.error
        assert fine.termination is TerminationReason.DONE and fine.reward == 1.0
    finally:
        family.close()


def test_bad_options_fail_in_one_line_before_anything_is_written(tmp_path, monkeypatch):
    base = [f"runs_dir={tmp_path}", "env.name=openenv", "sft.enabled=false"]
    for options, field in [
        ("{server: 'no_such_module:app'}", "env.options.server"),
        ("{}", "exactly one of server"),
        ("{server: 'openenv_counter:app', action: 'openenv_counter:CounterEnvironment'}",
         "env.options.action"),
        ("{server: 'openenv_counter:app', servers: 0}", "env.options.servers"),
        ("{server: 'openenv_counter:no_such_app'}", "env.options.server: the OpenEnv server"),
    ]:  # fmt: skip
        cfg = load_config(None, [*base, f"env.options={options}"])
        with pytest.raises(ConfigError, match=field) as e:
            preflight(cfg)
        assert "\n" not in str(e.value)
    assert not any(tmp_path.iterdir())
    import sys

    monkeypatch.setitem(sys.modules, "openenv_core", None)
    cfg = load_config(None, [*base, "env.options={server: 'openenv_counter:app'}"])
    with pytest.raises(ConfigError, match=r"pip install 'turnrl\[openenv\]'"):
        preflight(cfg)


def test_base_url_uses_a_server_it_did_not_start():
    starter = OpenEnvFamily(**COUNTER, servers=1)
    try:
        trajs, _, _ = play_forced(starter.make_env, starter.tasks("train", 1), [Climber()])
        url = starter.pool.servers[0].url
        family = OpenEnvFamily(base_url=url, action=COUNTER["action"])
        trajs, _, _ = play_forced(family.make_env, family.tasks("train", 1), [Climber()])
        assert trajs[0].termination is TerminationReason.DONE and trajs[0].reward == 1.0
        family.close()  # leaves the server it did not start
        assert starter.pool.servers[0].process.poll() is None
    finally:
        starter.close()


def test_doctor_passes(monkeypatch):
    monkeypatch.chdir(ROOT / "examples")
    options = "env.options={server: 'openenv_counter:app', action: 'openenv_counter:CounterAction'}"
    out = CliRunner().invoke(app, ["doctor", "openenv", options, "--tasks", "2"])
    assert out.exit_code == 0, out.output
    assert "all checks passed" in out.output


def test_one_training_step_through_turnrl_train(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT / "examples")
    options = "env.options={server: 'openenv_counter:app', action: 'openenv_counter:CounterAction'}"
    rows = train_one_step(tmp_path, ["env.name=openenv", options])
    assert [r["step"] for r in rows if "loss" in r] == [1]


def test_started_servers_stop_when_the_trainer_is_killed():
    """The servers outlive event loops (each env has its own) but not their process."""
    import subprocess
    import sys

    script = (
        "import asyncio, os, time\n"
        "from turnrl.envs.adapters.openenv import OpenEnvFamily\n"
        "f = OpenEnvFamily(server='openenv_counter:app', servers=1)\n"
        "f.pool.release(asyncio.run(f.pool.acquire())); time.sleep(1)\n"
        "asyncio.run(f.pool.acquire())\n"
        "print(f.pool.servers[0].process.pid, f.pool.servers[0].process.poll(), flush=True)\n"
        "os._exit(0)\n"  # no close(): as a SIGKILL would leave it
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT / "examples", capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    pid, status = done.stdout.split()
    assert status == "None"  # alive across the two event loops
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.2)
    assert (
        not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )
