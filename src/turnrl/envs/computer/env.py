"""The computer-use env: reach a goal state on a simulated desktop by clicking and typing.

Observation: the accessibility tree as text (element ids, roles, names, values, states) after a
one-line status of what the last action did. With ``screenshots=True`` every step's info also
carries a PNG of the screen (``StepResult.info["image"]``) for vision models; it is off by
default because rendering costs more than the rest of a step.

Reward: a state check of the final desktop (files and settings) against the task's goal state.
The goal is the whole state, so an unrelated change (a toggled setting, a deleted file) fails
the task even when the requested change was made.
"""

from __future__ import annotations

import copy
from typing import Any

from turnrl.envs.base import ToolEnv, ToolOutput
from turnrl.envs.computer.desktop import Desktop
from turnrl.envs.computer.render import screenshot
from turnrl.types import RewardResult, Task

INSTRUCTIONS = (
    "You operate a desktop through its accessibility tree; [n] is an element id. Actions: "
    "click(id), type(text) into the focused field (in a list, a dropdown or the settings "
    "form it selects the first item starting with the text), key(name) (Enter, Tab, "
    "Backspace, Delete, Escape, Space, Up, Down, ctrl+a, ctrl+s), scroll(id, amount) a list "
    "or form, open_app(name) (editor, files, settings), done() when the task is finished. "
    "Settings apply at once; files change only when saved, renamed or deleted."
)


def desktop_from_state(state: dict[str, Any]) -> Desktop:
    desktop = Desktop(dict(state["files"]), dict(state["settings"]))
    for app in state.get("open_apps", []):
        desktop.open_app(app)
    return desktop


def state_diff(initial: dict, goal: dict, final: dict) -> dict[str, list[str]]:
    """Which parts of the state are wrong: ``missing`` (asked for, not done or done wrong) and
    ``unrelated`` (changed although the task did not ask for it)."""
    missing, unrelated = [], []
    for part in ("files", "settings"):
        for key in sorted(set(initial[part]) | set(goal[part]) | set(final[part])):
            want, got, was = goal[part].get(key), final[part].get(key), initial[part].get(key)
            if got == want:
                continue
            (missing if want != was else unrelated).append(f"{part}:{key}")
    return {"missing": missing, "unrelated": unrelated}


class ComputerEnv(ToolEnv):
    name = "computer"
    tools = ("click", "type", "key", "scroll", "open_app", "done")

    def __init__(self, screenshots: bool = False) -> None:
        self.screenshots = screenshots
        self.desktop = Desktop({}, {})
        self.initial: dict[str, Any] = {}
        self.goal: dict[str, Any] = {}
        self.finished = False

    async def reset(self, task: Task) -> str:
        self.desktop = desktop_from_state(task.payload["initial"])
        self.initial = copy.deepcopy(self.desktop.snapshot())
        self.goal = task.payload["goal"]
        self.finished = False
        self.instructions = INSTRUCTIONS
        return f"Task: {task.payload['instruction']}\n{self.desktop.tree()}"

    def anchor(self, observation: str) -> Any:
        return self.desktop.tree()

    def screenshot(self) -> bytes:
        """The current screen as PNG bytes (also at reset, where no step info exists yet)."""
        return screenshot(self.desktop)

    def _observe(self, status: str) -> ToolOutput:
        text = f"{status}\n{self.desktop.tree()}" if status else self.desktop.tree()
        return ToolOutput(text, image=self.screenshot() if self.screenshots else None)

    # --- tools -------------------------------------------------------------------------------

    def click(self, id: int) -> ToolOutput:
        """Click the element with this id (a background window is focused first)."""
        return self._observe(self.desktop.click(id))

    def type(self, text: str) -> ToolOutput:
        """Type text into the focused field of the focused window; in a focused dropdown or the
        file list it selects the first option or file starting with the text."""
        return self._observe(self.desktop.type(text))

    def key(self, name: str) -> ToolOutput:
        """Press a key in the focused window: Enter, Tab, Backspace, Delete, Escape, Space, Up,
        Down, ctrl+a, ctrl+s."""
        return self._observe(self.desktop.key(name))

    def scroll(self, id: int, amount: int) -> ToolOutput:
        """Scroll a list or form by a number of rows (negative scrolls up)."""
        return self._observe(self.desktop.scroll(id, amount))

    def open_app(self, name: str) -> ToolOutput:
        """Open an app (editor, files or settings), or bring it to the front."""
        return self._observe(self.desktop.open_app(name))

    def done(self) -> ToolOutput:
        """Declare the task finished and end the episode."""
        self.finished = True
        return ToolOutput("Done.", done=True, image=self.screenshot() if self.screenshots else None)

    # --- grading -----------------------------------------------------------------------------

    async def grade(self) -> RewardResult:
        final = self.desktop.snapshot()
        diff = state_diff(self.initial, self.goal, final)
        wanted = len(state_diff(self.initial, self.goal, self.initial)["missing"])
        success = not diff["missing"] and not diff["unrelated"]
        return RewardResult(
            reward=float(success),
            success=success,
            proxy_success=float(success),
            components={
                "goal_fraction": (wanted - len(diff["missing"])) / wanted if wanted else 1.0,
                "unrelated_changes": float(len(diff["unrelated"])),
                "called_done": float(self.finished),
            },
            flags=["unrelated_changes"] if diff["unrelated"] else [],
            info=diff,
        )
