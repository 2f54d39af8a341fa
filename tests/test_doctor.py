"""``turnrl doctor``: passes on every shipped env and catches deliberately broken ones."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from examples.calculator import CalculatorEnv
from turnrl.cli import app, console
from turnrl.envs.doctor import schema_problems
from turnrl.envs.registry import SHIPPED
from turnrl.types import RewardResult, Task, ToolCall

runner = CliRunner()


class CalculatorExpert:
    """Multiplies, adds, answers; ``off_by`` makes it answer wrong."""

    def __init__(self, task: Task, off_by: int = 0) -> None:
        a, _, b, _, c = task.payload["question"].split()
        product = int(a) * int(b)
        self.calls = iter(
            [
                ToolCall("multiply", {"a": int(a), "b": int(b)}),
                ToolCall("add", {"a": product, "b": int(c)}),
                ToolCall("answer", {"value": product + int(c) + off_by}),
            ]
        )

    def act(self, observation: str) -> ToolCall | None:
        return next(self.calls, None)


class ExpertCalculator(CalculatorEnv):
    @staticmethod
    def expert(task: Task, seed: int = 0, noise: float = 0.0) -> CalculatorExpert:
        return CalculatorExpert(task)


class WrongExpert(CalculatorEnv):
    @staticmethod
    def expert(task: Task, seed: int = 0, noise: float = 0.0) -> CalculatorExpert:
        return CalculatorExpert(task, off_by=1)


_calls = 0


class FlakyReplay(ExpertCalculator):
    """Its observations carry global state (a call counter): replaying the same calls into a
    fresh env gives other observations."""

    def multiply(self, a: int, b: int) -> str:
        """Multiply two integers."""
        global _calls
        _calls += 1
        return f"{a * b} (call {_calls})"


class GradeRaises(ExpertCalculator):
    """Grades ``given - expected`` without checking that anything was given."""

    async def grade(self) -> RewardResult:
        error = abs(self.given - self.expected)
        return RewardResult(float(error == 0), error == 0)


class PaysForNothing(ExpertCalculator):
    async def grade(self) -> RewardResult:
        return RewardResult(1.0, self.given in (None, self.expected))


class StepRaises(ExpertCalculator):
    """A tool that lets an exception escape instead of raising ToolError."""

    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        if a < 0 or b < 0:
            raise ValueError("negative numbers are not supported")
        return str(a + b)


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch):
    monkeypatch.setattr(console, "width", 250)  # one table row per line


def doctor(env: str, *args: str):
    return runner.invoke(app, ["doctor", env, "--tasks", "3", *args])


def rows(output: str) -> dict[str, str]:
    """check name -> PASS/FAIL/- from the printed table."""
    out = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) >= 3 and cells[1] in ("PASS", "FAIL", "-"):
            out[cells[0]] = cells[1]
    return out


# the adapters of other libraries' envs need options (which game, dataset, server): each one's
# doctor run is in its own test file (tests/test_adapter_*.py)
ADAPTERS = {n for n, (target, _) in SHIPPED.items() if target.startswith("turnrl.envs.adapters")}


@pytest.mark.parametrize("env", sorted(set(SHIPPED) - {"code-weak"} - ADAPTERS))
def test_every_shipped_env_passes(env):
    out = doctor(env, "--tasks", "2")
    assert out.exit_code == 0, out.output
    result = rows(out.output)
    assert set(result.values()) <= {"PASS", "-"}, out.output
    assert result["expert succeeds"] == "PASS" and result["replay is deterministic"] == "PASS"


def test_code_weak_is_flagged_for_paying_unfixed_bugs():
    # By design its training reward comes from weak tests that an unfixed bug often passes:
    # exactly what the do-nothing check exists to catch, while true success stays 0.
    out = doctor("code-weak", "--tasks", "2")
    assert out.exit_code == 1
    result = rows(out.output)
    assert result["do-nothing scores ~0"] == "FAIL" and "success 0.00" in out.output
    assert result["expert succeeds"] == result["replay is deterministic"] == "PASS"


def test_example_env_with_and_without_expert():
    out = doctor("examples.calculator:CalculatorEnv")
    assert out.exit_code == 0, out.output
    assert rows(out.output)["expert succeeds"] == "-"  # it has none: optional
    out = doctor("tests.test_doctor:ExpertCalculator")
    assert out.exit_code == 0, out.output
    assert rows(out.output)["expert succeeds"] == "PASS" and "3/3 tasks solved" in out.output


@pytest.mark.parametrize(
    "env, failing, says",
    [
        ("FlakyReplay", "replay is deterministic", "observation differs"),
        ("GradeRaises", "grade never raises", "grade raised TypeError"),
        ("WrongExpert", "expert succeeds", "0/3 tasks solved"),
        ("PaysForNothing", "do-nothing scores ~0", "mean reward 1.00"),
        ("StepRaises", "reset/step/grade contract", "raised ValueError: negative numbers"),
    ],
)
def test_broken_envs_fail_the_check_that_names_their_fault(env, failing, says):
    out = doctor(f"tests.test_doctor:{env}")
    assert out.exit_code == 1, out.output
    result = rows(out.output)
    assert result[failing] == "FAIL", out.output
    assert says in out.output, out.output
    assert "check(s) failed" in out.output


def test_unknown_env_is_a_config_error():
    out = doctor("tests.test_doctor:Missing")
    assert out.exit_code == 2 and "has no attribute 'Missing'" in out.output


def test_schema_problems():
    good = CalculatorEnv().tool_schemas()
    assert all(schema_problems(s) == [] for s in good)
    nodoc = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    assert "no description" in schema_problems(nodoc)[0]
    bad = {
        "type": "function",
        "function": {
            "name": "f",
            "description": "d",
            "parameters": {"type": "object", "properties": 3},
        },
    }
    assert "invalid JSON schema" in schema_problems(bad)[0]
    assert "not {'type': 'function'" in schema_problems({"name": "f"})[0]
