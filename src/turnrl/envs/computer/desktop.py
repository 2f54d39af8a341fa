"""A simulated desktop: a virtual file system, settings, and three apps in windows.

Pure Python state, no GUI toolkit. What an agent sees is the accessibility tree (``tree()``),
one line per element with an id: ``[12] button "Save"``. Ids are the elements' positions in a
walk over the windows in the order they were opened, so they are stable within a state (and
focusing a window, which only changes the stacking order, does not renumber anything).

Focus rules:

* Exactly one window has focus when any is open: the last one opened, raised by ``open_app``,
  or clicked. Closing it gives focus to the window below it.
* ``click(id)`` on an element of a background window focuses that window *and* performs the
  click (click-through, as on most desktops); clicking a window element only focuses it.
* Clicking a text field, checkbox or dropdown gives it keyboard focus within its window.
* ``type`` and ``key`` go to the focused window only. ``type`` writes into a focused text
  field; elsewhere it is type-ahead: in a focused dropdown it selects the first option
  starting with the text, in the file list (no text field focused) the first such file, and in
  the settings form (nothing or a checkbox focused) it focuses the first such setting,
  scrolling it into view. In the editor with nothing focused it is refused with an
  observation. ``Escape`` leaves a field; ``scroll`` does not change focus.

Settings apply as soon as they change (no Apply button); files change only when the editor
saves or the file manager renames or deletes. The graded state is ``snapshot()``: files and
settings; windows, scroll positions and unsaved editor text are not part of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from turnrl.envs.base import ToolError
from turnrl.envs.computer.apps import APPS, App, Control

KEYS = ("Enter", "Tab", "Backspace", "Delete", "Escape", "Space", "Up", "Down", "ctrl+a", "ctrl+s")
_KEY_ALIASES = {k.lower(): k for k in KEYS} | {"return": "Enter", "esc": "Escape", "del": "Delete"}
_APP_NAMES = {n: n for n in APPS} | {c.title.lower(): n for n, c in APPS.items()}


@dataclass(frozen=True)
class Element:
    id: int
    app: str
    control: Control


@dataclass
class Desktop:
    files: dict[str, str]
    settings: dict[str, bool | str]
    windows: list[App] = field(default_factory=list)  # apps in the order they were opened
    stack: list[App] = field(default_factory=list)  # the same, bottom to top; stack[-1] has focus

    @property
    def focused(self) -> App | None:
        return self.stack[-1] if self.stack else None

    def snapshot(self) -> dict:
        """The graded state."""
        return {"files": dict(self.files), "settings": dict(self.settings)}

    def elements(self) -> list[Element]:
        out: list[Element] = []
        for app in self.windows:
            states = ("focused",) if app is self.focused else ()
            controls = [Control("window", app.title, "window", states=states, depth=0)]
            for c in app.controls(self):
                if app is self.focused and c.key == app.focus:
                    c = Control(
                        c.role, c.name, c.key, c.value, c.states + self._focus_states(app), c.depth
                    )
                controls.append(c)
            out += [Element(len(out) + i + 1, app.name, c) for i, c in enumerate(controls)]
        return out

    @staticmethod
    def _focus_states(app: App) -> tuple[str, ...]:
        return ("focused", "all-selected") if app.text.select_all else ("focused",)

    def tree(self) -> str:
        lines = [
            "  " * e.control.depth
            + f"[{e.id}] {e.control.role} {json.dumps(e.control.name, ensure_ascii=False)}"
            + (f" {e.control.value}" if e.control.value is not None else "")
            + "".join(f" {s}" for s in e.control.states)
            for e in self.elements()
        ]
        if not lines:
            lines = ["No open windows."]
        return "\n".join(lines + ["Apps: editor, files, settings"])

    # --- actions (each returns a one-line status) ---------------------------------------

    def open_app(self, name: str) -> str:
        app_name = _APP_NAMES.get(name.strip().lower())
        if app_name is None:
            raise ToolError(f"no app named '{name}'; apps: editor, files, settings")
        app = next((a for a in self.windows if a.name == app_name), None)
        if app is None:
            app = APPS[app_name]()
            self.windows.append(app)
            self.stack.append(app)
            return f"Opened {app.title}."
        self._raise(app)
        return f"Switched to {app.title}."

    def element(self, id: int) -> Element:
        elements = self.elements()
        if not 1 <= id <= len(elements):
            shown = f"ids on screen are 1-{len(elements)}" if elements else "no window is open"
            raise ToolError(f"no element [{id}] on screen; {shown}")
        return elements[id - 1]

    def click(self, id: int) -> str:
        e = self.element(id)
        app = self._app(e.app)
        self._raise(app)  # click-through: focus the window, then deliver the click
        if e.control.role == "window":
            return f"Focused {app.title}."
        if e.control.role == "label":
            return ""
        if e.control.key == "close":
            self.windows.remove(app)
            self.stack.remove(app)
            return f"Closed {app.title}."
        return (
            app.click(e.control.key, self)
            or f"Clicked [{id}] {e.control.role} {json.dumps(e.control.name)}."
        )

    def type(self, text: str) -> str:
        app = self.focused
        if app is None:
            raise ToolError("no window is open, so there is nothing to type into")
        return app.type(text, self)

    def key(self, name: str) -> str:
        key = _KEY_ALIASES.get(name.strip().lower().replace(" ", ""))
        if key is None:
            raise ToolError(f"unknown key '{name}'; keys: {', '.join(KEYS)}")
        if self.focused is None:
            raise ToolError("no window is open to receive keys")
        return self.focused.key(key, self) or f"Pressed {key}."

    def scroll(self, id: int, amount: int) -> str:
        e = self.element(id)
        if e.control.role not in ("list", "form"):
            scrollable = [
                f"[{x.id}]" for x in self.elements() if x.control.role in ("list", "form")
            ]
            hint = f"; scrollable: {', '.join(scrollable)}" if scrollable else ""
            raise ToolError(f"[{id}] {e.control.role} cannot scroll{hint}")
        return self._app(e.app).scroll(amount, self)

    def _app(self, name: str) -> App:
        return next(a for a in self.windows if a.name == name)

    def _raise(self, app: App) -> None:
        self.stack.remove(app)
        self.stack.append(app)
