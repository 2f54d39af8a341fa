"""The three apps of the simulated desktop: a text editor, a file manager, a settings form.

Each app is a plain class with the same small interface (``App``); ``Desktop`` owns windows,
focus and element ids and hands each action to the app whose element it hits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from turnrl.envs.base import ToolError

if TYPE_CHECKING:
    from turnrl.envs.computer.desktop import Desktop


@dataclass(frozen=True)
class Setting:
    key: str
    role: str  # "checkbox", "dropdown" or "textbox"
    label: str
    options: tuple[str, ...] = ()


SETTINGS: tuple[Setting, ...] = (
    Setting("wifi", "checkbox", "Wi-Fi"),
    Setting("bluetooth", "checkbox", "Bluetooth"),
    Setting("dark_mode", "checkbox", "Dark mode"),
    Setting("notifications", "checkbox", "Notifications"),
    Setting(
        "language",
        "dropdown",
        "Language",
        ("English", "French", "German", "Spanish", "Italian", "Dutch", "Polish", "Greek"),
    ),
    Setting("font_size", "dropdown", "Font size", ("Small", "Medium", "Large")),
    Setting("auto_save", "checkbox", "Auto-save"),
    Setting("timezone", "dropdown", "Time zone", ("UTC", "CET", "EST", "PST", "JST")),
    Setting("username", "textbox", "Username"),
    Setting("email", "textbox", "Email"),
)
SETTING = {s.key: s for s in SETTINGS}


@dataclass(frozen=True)
class Control:
    """One accessible element of a window (the window itself included)."""

    role: str
    name: str
    key: str  # the app's handle for it
    value: str | None = None
    states: tuple[str, ...] = ()
    depth: int = 1


class App(Protocol):
    """What each app implements; ``Desktop`` handles windows, focus and ids."""

    name: str
    title: str
    focus: str | None
    status: str
    text: TextFocus

    def controls(self, desktop: Desktop) -> list[Control]: ...
    def click(self, key: str, desktop: Desktop) -> str: ...
    def key(self, name: str, desktop: Desktop) -> str: ...
    def scroll(self, amount: int, desktop: Desktop) -> str: ...
    def type(self, text: str, desktop: Desktop) -> str: ...
    def get_text(self, key: str, desktop: Desktop) -> str: ...
    def set_text(self, key: str, value: str, desktop: Desktop) -> None: ...


def quoted(text: str, limit: int = 60) -> str:
    short = text if len(text) <= limit else text[: limit - 3] + "..."
    return json.dumps(short, ensure_ascii=False)


@dataclass
class TextFocus:
    """Keyboard editing shared by the apps: typing appends at the end of the focused field;
    ctrl+a selects all, so the next typing or Backspace replaces or clears it."""

    select_all: bool = False

    def type(self, app: App, text: str, desktop: Desktop, multiline: bool) -> str:
        current = "" if self.select_all else app.get_text(app.focus or "", desktop)
        if not multiline:
            text = text.replace("\n", " ")
        app.set_text(app.focus or "", current + text, desktop)
        self.select_all = False
        return f"Typed {quoted(text, 30)}."

    def backspace(self, app: App, desktop: Desktop) -> str:
        current = app.get_text(app.focus or "", desktop)
        app.set_text(app.focus or "", "" if self.select_all else current[:-1], desktop)
        self.select_all = False
        return "Deleted text."


class EditorApp:
    name, title = "editor", "Text Editor"

    def __init__(self) -> None:
        self.fields = {"filename": "", "content": ""}
        self.focus: str | None = None
        self.text = TextFocus()
        self.status = ""

    def controls(self, desktop: Desktop) -> list[Control]:
        out = [
            Control("textbox", "File name", "filename", quoted(self.fields["filename"])),
            Control("button", "Open", "open"),
            Control("button", "Save", "save"),
            Control("textarea", "Content", "content", quoted(self.fields["content"])),
            Control("button", "Close", "close"),
        ]
        return out + ([Control("label", self.status, "status")] if self.status else [])

    def click(self, key: str, desktop: Desktop) -> str:
        if key in self.fields:
            self.focus, self.text.select_all = key, False
            return ""
        if key == "open":
            return self._open(desktop)
        if key == "save":
            return self._save(desktop)
        return ""

    def _open(self, desktop: Desktop) -> str:
        name = self.fields["filename"].strip()
        if name not in desktop.files:
            self.status = f"No file named {name}" if name else "Type a file name first"
        else:
            self.fields["content"] = desktop.files[name]
            self.status = f"Opened {name}"
        return self.status + "."

    def _save(self, desktop: Desktop) -> str:
        name = self.fields["filename"].strip()
        if not name:
            self.status = "Type a file name first"
        else:
            desktop.files[name] = self.fields["content"]
            self.status = f"Saved {name}"
        return self.status + "."

    def key(self, name: str, desktop: Desktop) -> str:
        if name == "ctrl+s":
            return self._save(desktop)
        if name == "Tab":
            self.focus = "content" if self.focus == "filename" else "filename"
            self.text.select_all = False
            return f"Focus moved to {self.focus}."
        if self.focus is None:
            return ""
        if name == "Enter":
            if self.focus == "filename":
                return self._open(desktop)
            return self.text.type(self, "\n", desktop, multiline=True)
        return edit_key(self, self.text, name, desktop)

    def scroll(self, amount: int, desktop: Desktop) -> str:
        raise ToolError("the editor has nothing to scroll")

    def type(self, text: str, desktop: Desktop) -> str:
        if self.focus is None:
            raise ToolError(
                f"nothing in '{self.title}' has keyboard focus: click a text field first"
            )
        return self.text.type(self, text, desktop, multiline=self.focus == "content")

    def get_text(self, key: str, desktop: Desktop) -> str:
        return self.fields[key]

    def set_text(self, key: str, value: str, desktop: Desktop) -> None:
        self.fields[key] = value


class FilesApp:
    name, title = "files", "Files"
    view = 5  # list rows visible at once

    def __init__(self) -> None:
        self.offset = 0
        self.selected: str | None = None
        self.new_name = ""
        self.focus: str | None = None
        self.text = TextFocus()
        self.status = ""

    def controls(self, desktop: Desktop) -> list[Control]:
        names = sorted(desktop.files)
        self.offset = max(0, min(self.offset, len(names) - self.view))
        shown = names[self.offset : self.offset + self.view]
        span = f"items {self.offset + 1}-{self.offset + len(shown)} of {len(names)}"
        out = [Control("list", "Files", "list", span if names else "empty")]
        out += [
            Control(
                "listitem",
                n,
                f"file:{n}",
                states=("selected",) if n == self.selected else (),
                depth=2,
            )
            for n in shown
        ]
        out += [
            Control("textbox", "New name", "new_name", quoted(self.new_name)),
            Control("button", "Rename", "rename"),
            Control("button", "Delete", "delete"),
            Control("button", "Close", "close"),
        ]
        return out + ([Control("label", self.status, "status")] if self.status else [])

    def click(self, key: str, desktop: Desktop) -> str:
        if key.startswith("file:"):
            self.selected = key[len("file:") :]
            return f"Selected {self.selected}."
        if key == "new_name":
            self.focus, self.text.select_all = key, False
            return ""
        if key == "rename":
            return self._rename(desktop)
        if key == "delete":
            return self._delete(desktop)
        return ""

    def _rename(self, desktop: Desktop) -> str:
        new = self.new_name.strip()
        if self.selected not in desktop.files:
            self.status = "Select a file first"
        elif not new or "/" in new:
            self.status = "Type a valid new name first"
        elif new in desktop.files:
            self.status = f"{new} already exists"
        else:
            desktop.files[new] = desktop.files.pop(self.selected)
            self.status, self.selected = f"Renamed {self.selected} to {new}", new
        return self.status + "."

    def _delete(self, desktop: Desktop) -> str:
        if self.selected not in desktop.files:
            self.status = "Select a file first"
        else:
            del desktop.files[self.selected]
            self.status, self.selected = f"Deleted {self.selected}", None
        return self.status + "."

    def key(self, name: str, desktop: Desktop) -> str:
        if name == "Delete" and self.focus is None:
            return self._delete(desktop)
        if name == "Enter" and self.focus == "new_name":
            return self._rename(desktop)
        if name in ("Up", "Down") and self.focus is None:
            names = sorted(desktop.files)
            if not names:
                return ""
            i = names.index(self.selected) if self.selected in names else -1
            i = max(0, min(len(names) - 1, i + (1 if name == "Down" else -1)))
            self.selected = names[i]
            self.offset = into_view(self.offset, i, self.view)
            return f"Selected {self.selected}."
        if name in ("Escape", "Tab"):
            self.focus = None if name == "Escape" or self.focus else "new_name"
            return ""
        if self.focus is None:
            return ""
        return edit_key(self, self.text, name, desktop)

    def scroll(self, amount: int, desktop: Desktop) -> str:
        self.offset = max(0, min(self.offset + amount, len(desktop.files) - self.view))
        return "Scrolled."

    def type(self, text: str, desktop: Desktop) -> str:
        if self.focus is not None:
            return self.text.type(self, text, desktop, multiline=False)
        names = sorted(desktop.files)
        name = type_ahead(names, text)
        if name is None:
            raise ToolError(f"no file starts with '{text.strip()}'")
        i = names.index(name)
        self.selected = name
        self.offset = into_view(self.offset, i, self.view)
        return f"Selected {name}."

    def get_text(self, key: str, desktop: Desktop) -> str:
        return self.new_name

    def set_text(self, key: str, value: str, desktop: Desktop) -> None:
        self.new_name = value


class SettingsApp:
    name, title = "settings", "Settings"
    view = 6  # form rows visible at once

    def __init__(self) -> None:
        self.offset = 0
        self.expanded: str | None = None
        self.focus: str | None = None
        self.text = TextFocus()
        self.status = ""

    def controls(self, desktop: Desktop) -> list[Control]:
        shown = SETTINGS[self.offset : self.offset + self.view]
        span = f"rows {self.offset + 1}-{self.offset + len(shown)} of {len(SETTINGS)}"
        out = [Control("form", "Settings", "form", span)]
        for s in shown:
            value = desktop.settings[s.key]
            if s.role == "checkbox":
                out.append(
                    Control(
                        "checkbox", s.label, s.key, states=("checked",) if value else (), depth=2
                    )
                )
            elif s.role == "dropdown":
                expanded = ("expanded",) if self.expanded == s.key else ()
                out.append(
                    Control("dropdown", s.label, s.key, quoted(str(value)), expanded, depth=2)
                )
                if expanded:
                    out += [
                        Control(
                            "option",
                            o,
                            f"option:{s.key}:{o}",
                            states=("selected",) if o == value else (),
                            depth=3,
                        )
                        for o in s.options
                    ]
            else:
                out.append(Control("textbox", s.label, s.key, quoted(str(value)), depth=2))
        return out + [Control("button", "Close", "close")]

    def click(self, key: str, desktop: Desktop) -> str:
        if key.startswith("option:"):
            _, setting, option = key.split(":", 2)
            desktop.settings[setting] = option
            self.expanded, self.focus = None, setting
            return f"{SETTING[setting].label} set to {option}."
        if key not in SETTING:
            return ""
        s = SETTING[key]
        self.focus, self.text.select_all = key, False
        if s.role == "checkbox":
            return self._toggle(key, desktop)
        if s.role == "dropdown":
            self.expanded = None if self.expanded == key else key
            return f"{s.label} {'opened' if self.expanded else 'closed'}."
        return ""

    def _toggle(self, key: str, desktop: Desktop) -> str:
        desktop.settings[key] = not desktop.settings[key]
        return f"{SETTING[key].label} {'on' if desktop.settings[key] else 'off'}."

    def key(self, name: str, desktop: Desktop) -> str:
        if name == "Escape":  # collapse the dropdown and leave the field
            self.expanded = self.focus = None
            return ""
        if name == "Tab":
            keys = [s.key for s in SETTINGS[self.offset : self.offset + self.view]]
            i = keys.index(self.focus) if self.focus in keys else -1
            self.focus, self.text.select_all = keys[(i + 1) % len(keys)], False
            return f"Focus moved to {SETTING[self.focus].label}."
        if self.focus is None:
            return ""
        s = SETTING[self.focus]
        if s.role == "checkbox" and name in ("Space", "Enter"):
            return self._toggle(s.key, desktop)
        if s.role == "dropdown" and name in ("Up", "Down"):
            i = s.options.index(desktop.settings[s.key]) + (1 if name == "Down" else -1)
            desktop.settings[s.key] = s.options[max(0, min(len(s.options) - 1, i))]
            return f"{s.label} set to {desktop.settings[s.key]}."
        if s.role == "textbox":
            return edit_key(self, self.text, name, desktop)
        return ""

    def scroll(self, amount: int, desktop: Desktop) -> str:
        self.offset = max(0, min(self.offset + amount, len(SETTINGS) - self.view))
        self.expanded = None
        return "Scrolled."

    def type(self, text: str, desktop: Desktop) -> str:
        if self.focus is None or SETTING[self.focus].role == "checkbox":
            return self._jump(text)
        s = SETTING[self.focus]
        if s.role == "dropdown":
            option = type_ahead(list(s.options), text)
            if option is None:
                raise ToolError(f"{s.label} has no option starting with '{text.strip()}'")
            desktop.settings[s.key], self.expanded = option, None
            return f"{s.label} set to {option}."
        return self.text.type(self, text, desktop, multiline=False)

    def _jump(self, text: str) -> str:
        """Type-ahead over the form: focus the first setting whose label starts with the text."""
        label = type_ahead([s.label for s in SETTINGS], text)
        if label is None:
            raise ToolError(f"no setting starts with '{text.strip()}'")
        i = next(i for i, s in enumerate(SETTINGS) if s.label == label)
        self.offset = into_view(self.offset, i, self.view)
        self.focus, self.expanded, self.text.select_all = SETTINGS[i].key, None, False
        return f"Focus moved to {label}."

    def get_text(self, key: str, desktop: Desktop) -> str:
        return str(desktop.settings[key])

    def set_text(self, key: str, value: str, desktop: Desktop) -> None:
        desktop.settings[key] = value


def into_view(offset: int, row: int, view: int) -> int:
    """The smallest scroll from ``offset`` that shows ``row`` in a window of ``view`` rows."""
    return min(max(offset, row - view + 1), row)


def type_ahead(names: list[str], text: str) -> str | None:
    """The first name starting with the typed text (case and surrounding spaces ignored), as a
    list or dropdown selects on typing."""
    want = text.strip().lower()
    return next((n for n in names if want and n.lower().startswith(want)), None)


def edit_key(app: App, text: TextFocus, name: str, desktop: Desktop) -> str:
    """Keys every focused text field understands."""
    if name == "ctrl+a":
        text.select_all = True
        return "Selected all text."
    if name == "Backspace":
        return text.backspace(app, desktop)
    if name == "Escape":
        app.focus, text.select_all = None, False
    return ""


APPS = {"editor": EditorApp, "files": FilesApp, "settings": SettingsApp}
