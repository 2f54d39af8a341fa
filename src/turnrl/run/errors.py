"""What a command's error says, and its exit code (the CLI prints it; ``EXIT_CODES`` is the
table ``docs/cli.md`` and ``docs/faults.md`` give).

Every error is one or two lines: the file, field or path, and what to do. Bad input (exit 2) is
raised before anything is written; an error once work began (exit 1) leaves what was written,
and a run says how to continue it (the notes its training loop adds).
"""

from __future__ import annotations

from pathlib import Path

from turnrl.files import DISK_ERRORS, PERMISSION_ERRORS, NotWritable, free_mib, write_atomic
from turnrl.run.config import ConfigError

__all__ = ["EXIT_CODES", "explain", "write_atomic"]

EXIT_CODES = {
    0: "done",
    1: "the command failed while it worked (an env that fails in most episodes, a file that "
    "cannot be written, a crash); what it wrote is kept, and a run continues with "
    "turnrl train --resume RUN_DIR",
    2: "bad input (a config value, an option, a path): nothing was started or written",
    130: "stopped by Ctrl-C; a run continues with turnrl train --resume RUN_DIR",
}

# errors whose message names the file or the cause and what to do, printed as they are
SELF_EXPLAINED = ("CheckpointError", "BrokenEnv")


def explain(e: BaseException) -> tuple[int, list[str]]:
    """The exit code and the lines a user sees for an error escaping a command."""
    notes = list(getattr(e, "__notes__", []))
    if isinstance(e, KeyboardInterrupt):
        return 130, ["interrupted", *notes]
    if isinstance(e, ConfigError):
        lines = str(e).splitlines()
        if len(lines) == 1:
            return 2, [f"config error: {lines[0]} (nothing was started)"]
        return 2, ["config error (nothing was started):", *(f"  {ln}" for ln in lines)]
    if isinstance(e, NotWritable):
        return 2, [
            f"error: cannot write {e.filename}: {e.strerror}; use a writable directory (for a "
            "run: runs_dir=DIR)",
            *notes,
        ]
    if isinstance(e, OSError) and e.errno in DISK_ERRORS + PERMISSION_ERRORS:
        free = free_mib(Path(e.filename)) if e.filename else None
        room = (
            f" ({free:.0f} MiB free there)" if free is not None and e.errno in DISK_ERRORS else ""
        )
        return 1, [f"error: cannot write {e.filename or 'a file'}: {e.strerror}{room}", *notes]
    if isinstance(e, OSError) and e.filename:
        return 1, [f"error: {e.filename}: {e.strerror}", *notes]
    first = (str(e).strip().splitlines() or [""])[0][:1000]
    if type(e).__name__ in SELF_EXPLAINED:
        return 1, [f"error: {first}", *notes]
    head = f"error: {type(e).__name__}: {first}" if first else f"error: {type(e).__name__}"
    return 1, [head, *(notes or ["run the command again with --debug for the traceback"])]
