"""The ``turnrl`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from turnrl.train.config import ConfigError, load_config, recipe_names

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="RL for multi-step, tool-using LLM agents."
)
console = Console()

Overrides = Annotated[
    list[str] | None,
    typer.Argument(help="key=value overrides, e.g. recipe=guess-tiny steps=5 algo.advantage=rloo"),
]


def _config(config: Path | None, overrides: list[str] | None):
    try:
        return load_config(config, overrides or [])
    except ConfigError as e:
        console.print("[red]config error[/red] (nothing was started):")
        for line in str(e).splitlines():
            console.print(f"  {line}")
        raise typer.Exit(2) from None


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
            console.print(f"[red]--resume[/red]: {resume} has no config.yaml; not a run directory")
            raise typer.Exit(2)
        cfg = _config(resume / "config.yaml", overrides)
    else:
        cfg = _config(config, overrides)
    # Plain lines to a file or pipe: rich would wrap them at 80 columns there.
    plain = quiet or not sys.stdout.isatty()
    log = (lambda s: print(s, flush=True)) if plain else console.print
    run_dir = run_training(cfg, resume_dir=resume, quiet=quiet, log=log)
    log(f"done: {run_dir}  (report: {run_dir / 'report.html'}; browse: turnrl view {run_dir})")


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

    run_dir = Path(target)
    if (run_dir / "config.yaml").exists():
        cfg = _config(run_dir / "config.yaml", overrides)
    else:
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
def view(
    runs: Annotated[
        list[Path], typer.Argument(help="run directories, or folders of runs, to overlay")
    ],
    export: Annotated[
        Path | None,
        typer.Option(help="write one self-contained HTML page here instead of serving"),
    ] = None,
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0: any free port)")] = 8765,
    records_mb: Annotated[
        float, typer.Option(help="--export: embed the newest trajectory records up to this size")
    ] = 4.0,
) -> None:
    """Browse runs: metric curves overlaid, per-task and per-tier success, and every token of
    the recorded trajectories with its logprobs, ratio and advantage."""
    from turnrl.view.data import find_runs

    try:
        run_dirs = find_runs(runs)
    except ValueError as e:
        console.print(f"[red]turnrl view[/red]: {e}")
        raise typer.Exit(2) from None
    if export is not None:
        from turnrl.view.export import export_html

        console.print(str(export_html(run_dirs, export, records_mb=records_mb)))
        return
    from turnrl.view.server import make_server

    try:
        server = make_server(run_dirs, port=port)
    except OSError as e:
        console.print(f"[red]--port {port}[/red]: cannot listen on 127.0.0.1 ({e}); try --port 0")
        raise typer.Exit(2) from None
    host, bound = server.server_address[:2]
    print(f"turnrl view: http://{host}:{bound}/  ({len(run_dirs)} runs; Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


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
    """Rebuild RUN_DIR/report.html, the viewer's self-contained export of the run (with the
    reward-drift panel when RUN_DIR/audit.json exists)."""
    import shutil

    from turnrl.view.data import AUDIT_NAME, is_run, read_audit_c
    from turnrl.view.export import export_html

    if not is_run(run_dir):
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
    console.print(str(export_html([run_dir], run_dir / "report.html")))


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
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
