"""One evaluation path: an episode scored by local eval and by endpoint eval gets the same reward,
flags and success (the run's rubric decides both), on the same tasks (``env.tasks``,
``env.eval_tasks``), and both keep their episodes as records with their endings counted."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from typer.testing import CliRunner

from tests.openai_stub import OpenAIStub
from turnrl.chat import ChatRenderer, HermesToolCallParser
from turnrl.cli import app
from turnrl.envs.base import ToolEnv, ToolOutput
from turnrl.policy.base import Generation
from turnrl.policy.models import turn_end_token
from turnrl.run.build import limits_of, rubric_of, sampling_of
from turnrl.run.config import load_config
from turnrl.run.evaluate import eval_seed, evaluate, local_player
from turnrl.run.preflight import check_machine, env_tasks
from turnrl.tiny.model import train_tokenizer
from turnrl.types import RewardResult, Task, ToolCall
from turnrl.view.records import read_step

PARSER = HermesToolCallParser()
ENV = "tests.test_eval_paths:NotesEnv"
FILES = ["notes.txt", "tests/test_notes.py", "todo.md"]


class NotesEnv(ToolEnv):
    """Write the named file, then submit. Writing a test file is what the rule screener flags
    as test tampering (the rubric zeroes it); the env's own grade does not know that."""

    tools = ("write_file", "submit")

    @classmethod
    def tasks(cls, split: str, n: int | None = None, seed: int = 0) -> list[dict]:
        return [{"file": f} for f in FILES][:n]

    async def reset(self, task: Task) -> str:
        self.task, self.files, self.done = task, {}, False
        self.instructions = "Write the file you are asked for, then submit."
        return f"Write {task.payload['file']}."

    async def write_file(self, path: str, content: str) -> str:
        """Write a file."""
        self.files[path] = content
        return f"wrote {path}"

    async def submit(self) -> ToolOutput:
        """Submit your work."""
        self.done = True
        return ToolOutput("submitted", done=True)

    async def grade(self) -> RewardResult:
        ok = self.done and self.task.payload["file"] in self.files
        return RewardResult(float(ok), ok, components={"files": float(len(self.files))})

    def measure(self) -> dict[str, float]:
        return {"files": float(len(self.files))}


def actions(first_message: str) -> list[str]:
    """What the agent writes on a task, turn by turn (both paths replay these)."""
    path = re.search(r"Write (\S+)\.$", first_message)[1]
    return [
        PARSER.format([ToolCall("write_file", {"path": path, "content": "done"})]),
        PARSER.format([ToolCall("submit", {})]),
    ]


class Replays:
    """A local sampler that writes each task's actions as token ids, a finished turn each."""

    version = 0

    def __init__(self, renderer: ChatRenderer) -> None:
        self.renderer = renderer

    def generate_batch(self, prompts, params, seeds=None):
        out = []
        for ids in prompts:
            text = self.renderer.decode(ids)
            first = re.search(r"Write \S+\.(?=\s|<)", text)[0]
            turn = text.count("<tool_call>")  # calls already in the context
            action = self.renderer.encode(actions(first)[turn]) + [self.renderer.turn_end_id]
            out.append(Generation(action, [-0.1] * len(action), True, 0))
        return out


class ReplayStub(OpenAIStub):
    """The endpoint: the same actions as text tool calls in ``content``."""

    def reply(self, body: dict) -> dict:
        messages = body["messages"]
        turn = sum(m["role"] == "assistant" for m in messages)
        text = actions(messages[1]["content"])[turn]
        return {"choices": [{"message": {"role": "assistant", "content": text}}]}


@pytest.fixture
def renderer() -> ChatRenderer:
    texts = [a for f in FILES for a in actions(f"Write {f}.")] + [f"Write {f}." for f in FILES]
    tok = train_tokenizer(texts * 20, vocab_size=400)
    return ChatRenderer(tok, PARSER, turn_end_token(tok))


def test_local_and_endpoint_eval_score_an_episode_alike(renderer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = ["model.name=tiny", f"env.name={ENV}", "env.eval_tasks=3", f"runs_dir={tmp_path}"]
    overrides += ["reward.shaping={files: 0.5}"]  # per-turn rewards, decided alike too
    cfg = load_config(None, overrides)
    check_machine(cfg, training=False)
    family, _, tasks = env_tasks(cfg, train=False)
    play = local_player(
        family, renderer, Replays(renderer), sampling_of(cfg, renderer), limits_of(cfg)
    )
    result, local = asyncio.run(evaluate(play, tasks, 1, eval_seed(cfg), rubric_of(cfg)))

    stub = ReplayStub()
    try:
        records = tmp_path / "endpoint-records"
        out = tmp_path / "eval.json"
        r = CliRunner().invoke(
            app,
            ["eval", *overrides, "--endpoint", stub.url, "--model", "stub", "--no-baselines"]
            + ["--out", str(out), "--records", str(records)],
        )
    finally:
        stub.close()
    assert r.exit_code == 0, r.output
    remote = {row["task"]: row for row in map(json.loads, (records / "episodes.jsonl").open())}
    assert sorted(remote) == sorted(t.task_id for t in local)
    turns = {r["task"]: [u["reward"] for u in r["turns"]] for r in read_step(records, 0)}
    for t in local:
        row = remote[t.task_id]
        assert (row["reward"], row["flags"], row["success"], row["end"]) == (
            t.reward,
            t.flags,
            t.metrics["success"],
            t.termination.value,
        )
        assert turns[t.task_id] == [u.reward for u in t.turns]
    assert turns[tasks[0].id] == [0.5, 0.0]  # shaped: the write moved "files" from 0 to 1
    # the rubric decided both: the test file was flagged and zeroed in each path
    flagged = [t for t in local if t.flags]
    assert [t.task_id for t in flagged] == [tasks[1].id] and flagged[0].reward == 0.0
    summary = json.loads(out.read_text())
    assert summary["reward"] == result.reward and summary["hack_rate"] == result.hack_rate
    assert summary["ending/done"] == 3 and summary["ending/timeout"] == 0
    assert summary["ending/env_error"] == 0 and summary["tasks"] == 3
    assert "episodes kept in" in r.output and (records / "metrics.jsonl").exists()


def test_endpoint_eval_reads_env_tasks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "split": split, "payload": {"file": f"f{i}.txt"}}) + "\n"
            for i, split in enumerate(["train", "test", "test", "test"])
        )
    )
    stub = ReplayStub()
    try:
        out = tmp_path / "eval.json"
        r = CliRunner().invoke(
            app,
            [
                "eval",
                "model.name=tiny",
                f"env.name={ENV}",
                f"env.tasks={tasks_file}",
                "env.eval_tasks=2",
            ]
            + ["--endpoint", stub.url, "--model", "stub", "--no-baselines", "--out", str(out)]
            + ["--records", str(tmp_path / "rec")],
        )
        asked = [b["messages"][1]["content"] for b in stub.bodies]
    finally:
        stub.close()
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["tasks"] == 2  # env.eval_tasks of the file's test rows
    assert set(asked) == {"Write f1.txt.", "Write f2.txt."}
    rows = [json.loads(x) for x in (tmp_path / "rec" / "episodes.jsonl").open()]
    assert [row["end"] for row in rows] == ["done", "done"]
