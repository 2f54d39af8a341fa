"""The ``turnrl`` command line.

Every command runs inside :class:`_Commands`, which turns an error into one or two lines
(the file, field or path, and what to do) and an exit code: 2 for bad input, 130 for Ctrl-C,
1 otherwise. ``--debug`` anywhere on the command line shows the traceback instead.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.console import Console

from turnrl.train.config import ConfigError, load_config, recipe_names

console = Console()
errors = Console(stderr=True, soft_wrap=True)  # soft_wrap: one message stays one line


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
    if isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return 2, [
            f"error: cannot write {e.filename or 'a file'}: {e.strerror}; use a writable "
            "directory (for a run: runs_dir=DIR)",
            *notes,
        ]
    if isinstance(e, OSError) and e.filename:
        return 1, [f"error: {e.filename}: {e.strerror}", *notes]
    first = (str(e).strip().splitlines() or [""])[0][:500]
    if type(e).__name__ == "CheckpointError":  # its message names the file and what is intact
        return 1, [f"error: {first}", *notes]
    head = f"error: {type(e).__name__}: {first}" if first else f"error: {type(e).__name__}"
    return 1, [head, *(notes or ["run the command again with --debug for the traceback"])]


class _Commands(typer.core.TyperGroup):
    """The command group with the shared error handling (see the module docstring)."""

    debug = False

    def main(self, args: Any = None, *a: Any, **kw: Any) -> Any:
        args = list(sys.argv[1:] if args is None else args)
        _Commands.debug = "--debug" in args
        return super().main([x for x in args if x != "--debug"], *a, **kw)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except (Exception, KeyboardInterrupt) as e:
            if _Commands.debug:
                raise
            code, lines = explain(e)
            for line in lines:
                errors.print(line, markup=False, highlight=False)
            raise typer.Exit(code) from None


app = typer.Typer(
    cls=_Commands,
    add_completion=False,
    no_args_is_help=True,
    help="RL for multi-step, tool-using LLM agents. Add --debug to any command to see the "
    "full traceback of an error.",
)

Overrides = Annotated[
    list[str] | None,
    typer.Argument(help="key=value overrides, e.g. recipe=guess-tiny steps=5 algo.advantage=rloo"),
]


def _config(config: Path | None, overrides: list[str] | None):
    return load_config(config, overrides or [])  # a ConfigError becomes exit 2 (explain)


def _bad_input(message: str) -> typer.Exit:
    errors.print(message, markup=False, highlight=False)
    return typer.Exit(2)


@app.command()
def train(
    overrides: Overrides = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML config file")] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="continue RUN_DIR from its last checkpoint")
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", help="plain log lines instead of a progress bar")
    ] = False,
) -> None:
    """Train a policy (default: the tiny model on the code env, SFT warm start then RL)."""
    from turnrl.train.loop import train as run_training

    if resume is not None:
        if not (resume / "config.yaml").exists():
            raise _bad_input(
                f"--resume {resume}: not a run directory (no config.yaml); give the directory "
                "a run was written to, such as runs/NAME"
            )
        cfg = _config(resume / "config.yaml", overrides)
    else:
        cfg = _config(config, overrides)
    log = (lambda s: print(s, flush=True)) if quiet else console.print
    run_dir = run_training(cfg, resume_dir=resume, quiet=quiet, log=log)
    console.print(f"run directory: {run_dir}  (report: {run_dir / 'report.html'})")


@app.command("eval")
def evaluate(
    target: Annotated[
        str, typer.Argument(help="a run directory (its trained model), or a model name/path")
    ],
    overrides: Overrides = None,
    k: Annotated[int, typer.Option(help="episodes per task (pass@k, pass^k)")] = 1,
    tasks: Annotated[int, typer.Option(help="held-out tasks to use")] = 40,
    baselines: Annotated[bool, typer.Option(help="also score do-nothing and random agents")] = True,
    out: Annotated[Path | None, typer.Option(help="write the results as JSON")] = None,
) -> None:
    """Evaluate a checkpoint or model on held-out tasks: success, pass@k, pass^k, mean turns."""
    from turnrl.train.eval_cli import run_eval
    from turnrl.train.preflight import check_model

    run_dir = Path(target)
    if (run_dir / "config.yaml").exists():
        cfg = _config(run_dir / "config.yaml", overrides)
    else:
        try:
            check_model(target, field="eval TARGET")
        except ConfigError:
            raise _bad_input(
                f"eval: {target} is neither a run directory (no {target}/config.yaml) nor a "
                "model directory; give a run directory such as runs/NAME, a model directory, "
                "tiny or smollm2"
            ) from None
        cfg = _config(None, [*(overrides or []), f"model.name={target}"])
        run_dir = None
    if k > 1 and cfg.rollout.held_out_temperature == 0:
        console.print(
            f"[red]--k {k}[/red] needs sampled episodes, and rollout.eval_temperature=0 decodes "
            "greedily (k identical tries): drop it or set rollout.eval_temperature=1.0"
        )
        raise typer.Exit(2)
    results = run_eval(cfg, run_dir, k=k, n_tasks=tasks, baselines=baselines)
    for name, value in results.items():
        console.print(
            f"{name:>24}: {value:.3f}" if isinstance(value, float) else f"{name:>24}: {value}"
        )
    if out is not None:
        out.write_text(json.dumps(results, indent=2))


@app.command()
def report(
    run_dir: Path,
    audit: Annotated[
        Path | None,
        typer.Option(
            help="a `turnrl audit` JSON: copied to RUN_DIR/audit.json; the report then plots "
            "the proxy success it predicts next to the measured proxy and true success"
        ),
    ] = None,
) -> None:
    """Rebuild RUN_DIR/report.html from its metrics and samples (and RUN_DIR/audit.json)."""
    import shutil

    from turnrl.report.html import AUDIT_NAME, read_audit_c, write_report

    if not (run_dir / "metrics.jsonl").exists():
        console.print(f"[red]{run_dir}[/red] has no metrics.jsonl")
        raise typer.Exit(2)
    if audit is not None:
        try:
            read_audit_c(audit)
        except (OSError, ValueError, KeyError, TypeError) as e:
            console.print(f"[red]--audit[/red] {audit}: not a usable audit report ({e})")
            raise typer.Exit(2) from None
        if audit.resolve() != (run_dir / AUDIT_NAME).resolve():
            shutil.copyfile(audit, run_dir / AUDIT_NAME)
    console.print(str(write_report(run_dir)))


@app.command()
def audit(
    env: Annotated[str, typer.Option(help="code or code-weak")] = "code",
    option: Annotated[
        list[str] | None, typer.Option(help="env option key=value (YAML value), repeatable")
    ] = None,
    split: Annotated[str, typer.Option(help="train or test")] = "test",
    tasks: Annotated[int | None, typer.Option(help="audit at most this many tasks")] = None,
    mutants: Annotated[int, typer.Option(help="mutants injected into each gold solution")] = 12,
    out: Annotated[Path, typer.Option(help="JSON report")] = Path("audit.json"),
    kinds: Annotated[
        str,
        typer.Option(
            help="mutation kinds to inject: 'tier' (each task's tier kinds, the bugs the env "
            "generates), 'all', or a comma list such as arith_op,constant"
        ),
    ] = "tier",
) -> None:
    """Estimate how far reward can drift: the share c of wrong solutions the tests catch, and
    the predicted gap (1 - p)(1 - c) between proxy reward and true success."""
    from turnrl.rewards.audit import parse_kinds, run_audit
    from turnrl.train.config import parse_overrides

    if env not in ("code", "code-weak"):
        raise _bad_input(
            f"audit --env {env}: mutation audits need the code env's gold solutions and "
            "tests; use --env code or --env code-weak"
        )
    options = parse_overrides(option or [])
    try:
        kinds_used = parse_kinds(kinds)
    except ValueError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    run_audit(
        env=env,
        options=options,
        split=split,
        n_tasks=tasks,
        max_mutants=mutants,
        out=out,
        kinds=kinds_used,
        console=console,
    )
    console.print(f"written: {out}")


@app.command()
def envs() -> None:
    """List the environments and the recipes shipped with turnrl."""
    from turnrl.envs.registry import FAMILIES

    console.print("[bold]environments[/bold]")
    for name, text in FAMILIES.items():
        console.print(f"  {name:<10} {text}")
    console.print("[bold]recipes[/bold] (turnrl train recipe=NAME)")
    for name in recipe_names():
        console.print(f"  {name}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
