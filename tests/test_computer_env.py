"""The computer-use env: desktop behaviour, focus rules, state checks, screenshots, agents."""

from __future__ import annotations

import asyncio
import io

import pytest
from PIL import Image

from turnrl.envs.computer import ComputerEnv, ComputerFamily
from turnrl.envs.computer.agents import parse_tree
from turnrl.envs.computer.apps import SETTINGS
from turnrl.envs.scripted import run_scripted
from turnrl.types import Task, ToolCall

SETTINGS0 = {
    s.key: (False if s.role == "checkbox" else s.options[0] if s.options else "ana")
    for s in SETTINGS
}


def _task(
    goal_files=None, goal_settings=None, files=None, open_apps=(), instruction="Test.", parts=()
):
    files = {"notes.txt": "hello", "todo.txt": "buy milk"} if files is None else files
    payload = {
        "instruction": instruction,
        "parts": list(parts),
        "initial": {"files": files, "settings": dict(SETTINGS0), "open_apps": list(open_apps)},
        "goal": {
            "files": goal_files if goal_files is not None else dict(files),
            "settings": {**SETTINGS0, **(goal_settings or {})},
        },
    }
    return Task("computer-unit", "computer", payload)


def _play(task: Task, calls: list[ToolCall], screenshots: bool = False):
    async def go():
        env = ComputerEnv(screenshots=screenshots)
        first = await env.reset(task)
        steps = [await env.step(c) for c in calls]
        return env, first, steps, await env.grade()

    return asyncio.run(go())


def _id(observation: str, role: str, name: str, window: str | None = None) -> int:
    tree = parse_tree(observation)
    assert tree is not None, observation
    return next(
        e.id for e in tree if e.role == role and e.name == name and window in (None, e.window)
    )


def click(i: int) -> ToolCall:
    return ToolCall("click", {"id": i})


def open_app(name: str) -> ToolCall:
    return ToolCall("open_app", {"name": name})


# --- state checks ----------------------------------------------------------------------------


def test_goal_state_reached_succeeds_and_unrelated_change_fails():
    task = _task(goal_settings={"dark_mode": True}, open_apps=["settings"])
    env, first, _, _ = _play(task, [])
    dark, wifi = _id(first, "checkbox", "Dark mode"), _id(first, "checkbox", "Wi-Fi")
    *_, good = _play(task, [click(dark), ToolCall("done", {})])
    assert good.success and good.reward == 1.0 and good.components["goal_fraction"] == 1.0
    *_, extra = _play(task, [click(dark), click(wifi), ToolCall("done", {})])
    assert not extra.success and extra.reward == 0.0
    assert extra.info["unrelated"] == ["settings:wifi"] and "unrelated_changes" in extra.flags
    assert extra.components["goal_fraction"] == 1.0, "the asked change was made, but not only it"
    *_, undone = _play(task, [click(wifi), click(wifi), click(dark)])
    assert undone.success, "a change that was undone is no change"
    *_, nothing = _play(task, [ToolCall("done", {})])
    assert not nothing.success and nothing.info["missing"] == ["settings:dark_mode"]


def test_file_tasks_are_checked_on_saved_content_only():
    task = _task(goal_files={"notes.txt": "hello", "todo.txt": "buy milk", "a.txt": "hi"})
    env, _, steps, result = _play(
        task,
        [
            open_app("editor"),
            click(2),  # File name
            ToolCall("type", {"text": "a.txt"}),
            click(5),  # Content
            ToolCall("type", {"text": "hi"}),
        ],
    )
    assert not result.success and result.info["missing"] == ["files:a.txt"], "not saved yet"
    saved = asyncio.run(env.step(ToolCall("key", {"name": "ctrl+s"})))
    assert "Saved a.txt" in saved.observation
    assert asyncio.run(env.grade()).success
    deleted = _task(goal_files={"todo.txt": "buy milk"}, open_apps=["files"])
    _, first, _, _ = _play(deleted, [])
    item, delete = _id(first, "listitem", "notes.txt"), _id(first, "button", "Delete")
    *_, ok = _play(deleted, [click(item), click(delete)])
    assert ok.success
    env, _, (_, after), _ = _play(deleted, [click(item), click(delete)])
    asyncio.run(env.step(click(_id(after.observation, "listitem", "todo.txt"))))
    asyncio.run(env.step(click(_id(after.observation, "button", "Delete"))))
    both = asyncio.run(env.grade())
    assert not both.success and both.info["unrelated"] == ["files:todo.txt"]


def test_editor_open_replace_append_and_backspace():
    task = _task(goal_files={"notes.txt": "hello\nworld", "todo.txt": "buy milk"})
    calls = [
        open_app("editor"),
        click(2),
        ToolCall("type", {"text": "notes.txt"}),
        ToolCall("key", {"name": "Enter"}),  # Enter in the file name opens the file
        click(5),
        ToolCall("key", {"name": "Enter"}),  # a newline in the text area
        ToolCall("type", {"text": "worlds"}),
        ToolCall("key", {"name": "Backspace"}),
        ToolCall("key", {"name": "ctrl+s"}),
    ]
    _, _, steps, result = _play(task, calls)
    assert '"hello"' in steps[3].observation
    assert result.success, steps[-1].observation
    _, _, steps, _ = _play(
        task, [*calls[:5], ToolCall("key", {"name": "ctrl+a"}), ToolCall("type", {"text": "new"})]
    )
    assert 'textarea "Content" "new" focused' in steps[-1].observation


# --- focus rules -----------------------------------------------------------------------------


def test_focus_rules_typing_and_click_through():
    task = _task(open_apps=["editor", "settings"])  # settings opened last: it has focus
    env, first, _, _ = _play(task, [])
    assert 'window "Settings" focused' in first and 'window "Text Editor" focused' not in first
    name_field = _id(first, "textbox", "File name")
    wifi = _id(first, "checkbox", "Wi-Fi")
    _, _, steps, result = _play(
        task,
        [
            ToolCall("type", {"text": "lost"}),  # nothing focused: type-ahead over the settings
            click(name_field),  # background window: focus it and deliver the click
            ToolCall("type", {"text": "x.txt"}),
            click(wifi),  # back to Settings, toggling Wi-Fi in the same click
            ToolCall("type", {"text": "nope"}),  # a checkbox takes no text: type-ahead again
            ToolCall("key", {"name": "Space"}),  # keys go to the focused window: Wi-Fi again
        ],
    )
    assert steps[0].observation.startswith("Error: no setting starts with 'lost'")
    assert 'window "Text Editor" focused' in steps[1].observation
    assert 'textbox "File name" "" focused' in steps[1].observation
    assert 'textbox "File name" "x.txt" focused' in steps[2].observation
    assert 'window "Settings" focused' in steps[3].observation
    assert 'checkbox "Wi-Fi" checked focused' in steps[3].observation
    assert 'textbox "File name" "x.txt"\n' in steps[3].observation, (
        "focus shown only in the focused window"
    )
    assert steps[4].observation.startswith("Error:")
    assert 'checkbox "Wi-Fi" focused' in steps[5].observation
    assert result.success, "Wi-Fi toggled twice, nothing saved: the state is unchanged"


def test_type_ahead_selects_in_the_file_list_and_a_focused_dropdown():
    files = {f"f{i}.txt": "x" for i in range(7)} | {"notes.txt": "hello"}
    task = _task(files=files, open_apps=["settings", "files"])  # files opened last: focused
    _, first, _, _ = _play(task, [])
    language = _id(first, "dropdown", "Language")
    _, _, steps, _ = _play(
        task,
        [
            ToolCall("type", {"text": " Notes"}),  # the list: case and spaces ignored
            ToolCall("type", {"text": "zzz"}),
            ToolCall("key", {"name": "Delete"}),
            click(language),  # focuses Settings and the dropdown, and expands it
            ToolCall("type", {"text": "ger"}),
            ToolCall("type", {"text": "Klingon"}),
        ],
    )
    assert 'listitem "notes.txt" selected' in steps[0].observation, "scrolled into view"
    assert "items 4-8 of 8" in steps[0].observation
    assert (
        steps[1].observation.startswith("Error:")
        and "no file starts with 'zzz'" in steps[1].observation
    )
    assert steps[2].observation.startswith("Deleted notes.txt.")
    assert 'dropdown "Language" "English" expanded focused' in steps[3].observation
    assert steps[4].observation.startswith("Language set to German.")
    assert 'dropdown "Language" "German" focused' in steps[4].observation, "collapsed"
    assert (
        steps[5].observation.startswith("Error:")
        and "no option starting with" in steps[5].observation
    )


def test_type_ahead_over_the_settings_form_focuses_and_scrolls():
    task = _task(open_apps=["editor", "settings"], goal_settings={"dark_mode": True})
    _, _, steps, result = _play(
        task,
        [
            ToolCall("type", {"text": " time"}),  # below the fold: scrolled into view
            ToolCall("key", {"name": "Escape"}),  # leaves the dropdown
            ToolCall("type", {"text": "Dark"}),
            ToolCall("key", {"name": "Space"}),
            open_app("editor"),
            ToolCall("type", {"text": "x"}),  # nothing focused in the editor takes text
        ],
    )
    assert steps[0].observation.startswith("Focus moved to Time zone.")
    assert 'dropdown "Time zone" "UTC" focused' in steps[0].observation
    assert "rows 3-8 of 10" in steps[0].observation
    settings_part = steps[1].observation.split('window "Settings" focused')[1]
    assert "focused" not in settings_part, "Escape left the field"
    assert steps[2].observation.startswith("Focus moved to Dark mode.")
    assert "keyboard focus" in steps[5].observation
    assert result.success


def test_ids_are_stable_when_focus_changes_and_closing_refocuses():
    task = _task(open_apps=["editor", "files"])
    env, first, _, _ = _play(task, [])
    editor_window = _id(first, "window", "Text Editor")
    _, _, (focus_editor, close_editor), _ = _play(
        task, [click(editor_window), click(_id(first, "button", "Close", "Text Editor"))]
    )
    before = [(e.id, e.name) for e in parse_tree(first)]
    assert [(e.id, e.name) for e in parse_tree(focus_editor.observation)] == before
    assert 'window "Text Editor" focused' in focus_editor.observation
    assert "Text Editor" not in close_editor.observation.split("\n", 1)[1]
    assert 'window "Files" focused' in close_editor.observation
    assert env.anchor("") == env.anchor("x") == env.desktop.tree(), "anchor is the state"


def test_type_and_key_without_windows_are_observations():
    _, _, steps, _ = _play(
        _task(), [ToolCall("type", {"text": "a"}), ToolCall("key", {"name": "Enter"})]
    )
    assert all(
        s.observation.startswith("Error:") and s.info["error"] == "tool_error" for s in steps
    )


# --- invalid requests ------------------------------------------------------------------------


def test_invalid_ids_keys_and_apps_are_clear_observations():
    task = _task(open_apps=["settings"])
    _, first, _, _ = _play(task, [])
    n = len(parse_tree(first))
    calls = [
        click(999),
        click(0),
        ToolCall("scroll", {"id": 999, "amount": 2}),
        ToolCall("scroll", {"id": _id(first, "button", "Close"), "amount": 2}),
        ToolCall("key", {"name": "F13"}),
        open_app("browser"),
        ToolCall("click", {"id": "Save"}),
        ToolCall("click", {}),
    ]
    _, _, steps, result = _play(task, calls)
    assert all(s.observation.startswith("Error:") and not s.terminated for s in steps)
    assert f"no element [999] on screen; ids on screen are 1-{n}" in steps[0].observation
    assert "cannot scroll; scrollable: [2]" in steps[3].observation
    assert "unknown key 'F13'" in steps[4].observation and "ctrl+s" in steps[4].observation
    assert "no app named 'browser'" in steps[5].observation
    assert [s.info["error"] for s in steps[-2:]] == ["bad_arguments", "bad_arguments"]
    assert result.components["goal_fraction"] == 1.0 and result.success  # nothing changed


def test_scrolling_reveals_settings_below_the_fold():
    task = _task(goal_settings={"timezone": "JST"}, open_apps=["settings"])
    _, first, _, _ = _play(task, [])
    assert "Time zone" not in first and "rows 1-6 of 10" in first
    form = _id(first, "form", "Settings")
    env, _, (scrolled,), _ = _play(task, [ToolCall("scroll", {"id": form, "amount": 10})])
    assert "rows 5-10 of 10" in scrolled.observation and "Wi-Fi" not in scrolled.observation
    zone = _id(scrolled.observation, "dropdown", "Time zone")
    opened = asyncio.run(env.step(click(zone)))
    jst = _id(opened.observation, "option", "JST")
    chosen = asyncio.run(env.step(click(jst)))
    assert 'dropdown "Time zone" "JST" focused' in chosen.observation
    assert asyncio.run(env.grade()).success


# --- screenshots -----------------------------------------------------------------------------


def test_screenshots_render_and_change_with_actions():
    task = _task(open_apps=["settings"])
    calls = [open_app("editor"), click(3), click(3), click(3)]
    env, _, steps, _ = _play(task, calls, screenshots=True)
    images = [s.info["image"] for s in steps]
    for png in images:
        img = Image.open(io.BytesIO(png))
        assert img.format == "PNG" and img.size == (760, 460)
    assert len(set(images[:3])) == 3, "a new window, a focus change, a toggle: all visible"
    assert images[1] == images[3], "the same state renders the same picture"
    assert env.screenshot() == images[3]
    _, _, (plain,), _ = _play(task, [click(3)])
    assert "image" not in plain.info, "screenshots are off by default"


# --- tasks and agents ------------------------------------------------------------------------


def test_tasks_deterministic_split_by_instruction_and_every_goal_needs_a_change():
    fam = ComputerFamily()
    train, test = fam.tasks("train", 120), fam.tasks("test", 60)
    assert [t.to_json() for t in train] == [t.to_json() for t in fam.tasks("train", 120)]
    assert fam.tasks("train", 10, seed=1) != train[:10]
    assert all(Task.from_json(t.to_json()) == t for t in train[:20])
    assert {t.payload["instruction"] for t in train}.isdisjoint(
        {t.payload["instruction"] for t in test}
    )
    assert {t.payload["tier"] for t in test} == {"easy", "medium", "hard"}
    for t in train + test:
        initial = {k: t.payload["initial"][k] for k in ("files", "settings")}
        assert initial != t.payload["goal"], t.payload["instruction"]
    assert len(fam.tasks("train")) == 256 and len(fam.tasks("test")) == 64
    assert all(
        len(t.payload["instruction"]) < 80 for t in ComputerFamily(tier="easy").tasks("train", 30)
    )


def test_options_are_validated_by_name():
    with pytest.raises(ValueError, match="tier"):
        ComputerFamily(tier="impossible")
    with pytest.raises(ValueError, match="screenshot"):
        ComputerFamily(screenshot=True)
    with pytest.raises(ValueError, match="split"):
        ComputerFamily().tasks("valid")


def _run_all(fam: ComputerFamily, tasks: list[Task], make_agent, max_turns: int = 30):
    async def go():
        return await asyncio.gather(
            *(run_scripted(fam.make_env(), t, make_agent(t), max_turns) for t in tasks)
        )

    return asyncio.run(go())


@pytest.mark.parametrize("tier", ["easy", "medium", "hard"])
def test_expert_solves_every_tier_concurrently(tier):
    fam = ComputerFamily(tier=tier)
    tasks = fam.tasks("train", 20) + fam.tasks("test", 10)
    episodes = _run_all(fam, tasks, fam.expert)
    failed = [e.task.payload["instruction"] for e in episodes if not e.result.success]
    assert not failed, failed
    calls = sum(len(e.calls) - 1 for e in episodes) / len(episodes)  # done() not counted
    low, high = {"easy": (1, 3), "medium": (3, 6), "hard": (5, 9)}[tier]
    assert low <= calls <= high, f"{tier}: {calls:.1f} actions on average"


def test_expert_with_screenshots_and_noise():
    fam = ComputerFamily(screenshots=True, tier="easy")
    episodes = _run_all(fam, fam.tasks("train", 8), fam.expert)
    assert all(e.result.success for e in episodes)
    plain = ComputerFamily()
    noisy = _run_all(plain, plain.tasks("train", 30), lambda t: plain.expert(t, seed=3, noise=0.3))
    assert 0.5 <= sum(e.result.success for e in noisy) / 30 < 1.0


@pytest.mark.parametrize("copy_spaces", [False, True])
def test_expert_types_names_with_the_read_space_only_when_asked(copy_spaces):
    """copy_spaces (set by the tiny recipe) makes the expert type ahead " Notifications", the
    tokens a model that copies reads in the instruction; either way the apps ignore it."""
    fam = ComputerFamily(tier="easy", copy_spaces=copy_spaces)
    episodes = _run_all(fam, fam.tasks("train", 12), fam.expert)
    assert all(e.result.success for e in episodes)
    typed = [c.arguments["text"] for e in episodes for c in e.calls if c.name == "type"]
    assert typed and all(t.startswith(" ") == copy_spaces for t in typed), typed


def test_baselines_score_near_zero():
    fam = ComputerFamily()
    tasks = fam.tasks("test", 60)
    nothing = _run_all(fam, tasks, fam.baseline)
    assert all(len(e.calls) == 1 and e.terminated for e in nothing)
    assert sum(e.result.reward for e in nothing) / len(tasks) <= 0.05
    rand = _run_all(fam, tasks, lambda t: fam.random_agent(t, seed=0))
    mean = sum(e.result.reward for e in rand) / len(tasks)
    print(f"random-agent mean reward on {len(tasks)} computer test tasks: {mean:.3f}")
    assert mean <= 0.1
