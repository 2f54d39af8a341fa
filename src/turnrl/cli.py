"""The ``turnrl`` command line. It talks only to :mod:`turnrl.run`, the composition root.

Every command runs inside :class:`_Commands`, which turns an error into one or two lines
(the file, field or path, and what to do) and an exit code: 2 for bad input, 130 for Ctrl-C,
1 otherwise. ``--debug`` anywhere on the command line shows the traceback instead.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.console import Console

from turnrl.run.config import ConfigError, load_config, recipe_names

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
            if os.environ.get("RANK", "0") == "0":  # under torchrun every rank fails alike
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


@contextmanager
def _template_errors():
    """A model whose chat template breaks the token-exact contract: one line, exit 2."""
    from turnrl.run.commands import TemplateError

    try:
        yield
    except TemplateError as e:
        console.print(f"[red]chat template[/red]: {e}", soft_wrap=True)
        raise typer.Exit(2) from None


@app.command("check-template")
def check_template(
    model: Annotated[str, typer.Argument(help="a model name or directory (its tokenizer)")],
    tool_format: Annotated[
        str, typer.Option(help="auto, hermes, llama3, mistral or json")
    ] = "auto",
) -> None:
    """Check a model's chat template against what token-exact episodes need."""
    from turnrl.run.commands import check_template as check_model_template

    if tool_format not in ("auto", "hermes", "llama3", "mistral", "json"):
        console.print(
            f"[red]--tool-format[/red] {tool_format!r}: use auto, hermes, llama3, mistral or json"
        )
        raise typer.Exit(2)
    with _template_errors():
        renderer = check_model_template(model, tool_format)  # type: ignore[arg-type]
    console.print(
        f"{model}: chat template ok (turn end {renderer.turn_end!r}, "
        f"tool calls {type(renderer.parser).__name__})",
        soft_wrap=True,
    )


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
    from turnrl.run.recipe import train as run_training

    if resume is not None:
        if not (resume / "config.yaml").exists():
            raise _bad_input(
                f"--resume {resume}: not a run directory (no config.yaml); give the directory "
                "a run was written to, such as runs/NAME"
            )
        cfg = _run_config(resume, overrides)
    else:
        cfg = _config(config, overrides)
    # Plain lines to a file or pipe: rich would wrap them at 80 columns there.
    plain = quiet or not sys.stdout.isatty()
    log = (lambda s: print(s, flush=True)) if plain else console.print
    with _template_errors():
        run_dir = run_training(cfg, resume_dir=resume, quiet=quiet, log=log)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 alone talks
        log(f"done: {run_dir}  (report: {run_dir / 'report.html'}; browse: turnrl view {run_dir})")


@app.command("eval")
def evaluate(
    target: Annotated[
        str | None,
        typer.Argument(help="a run directory (its trained model), or a model name/path"),
    ] = None,
    overrides: Overrides = None,
    k: Annotated[int, typer.Option(help="episodes per task (pass@k, pass^k)")] = 1,
    tasks: Annotated[
        int | None,
        typer.Option(
            min=1, help="held-out tasks to use (default: env.eval_tasks, as the run's own eval)"
        ),
    ] = None,
    baselines: Annotated[bool, typer.Option(help="also score do-nothing and random agents")] = True,
    out: Annotated[Path | None, typer.Option(help="write the results as JSON")] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(help="evaluate the model behind this OpenAI-compatible base URL instead"),
    ] = None,
    model: Annotated[str | None, typer.Option(help="the endpoint's model name")] = None,
    temperature: Annotated[
        float | None, typer.Option(help="endpoint sampling temperature (unset: server default)")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="endpoint max_tokens per reply (unset: server default)")
    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for each endpoint reply")] = 60,
    records: Annotated[
        Path | None,
        typer.Option(
            help="keep the episodes here for turnrl view (default: runs_dir/eval-TARGET-ENV)"
        ),
    ] = None,
) -> None:
    """Evaluate a run, a model or an endpoint on held-out tasks: success, pass@k, pass^k, mean
    turns, the endings by reason; the episodes are kept as records turnrl view opens. With
    --endpoint URL --model NAME, an external model is the agent (overrides pick the env)."""
    from turnrl.run.evaluate import records_dir, run_eval
    from turnrl.run.preflight import HubUnavailable, check_model

    if endpoint is not None:
        _eval_endpoint(
            endpoint,
            model,
            target,
            overrides,
            k,
            tasks,
            baselines,
            out,
            records,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout=timeout,
        )
        return
    if model is not None or temperature is not None or max_tokens is not None:
        console.print("[red]--model/--temperature/--max-tokens[/red] go with --endpoint URL")
        raise typer.Exit(2)
    if target is None:
        console.print(
            "[red]eval[/red]: give a run directory or model, or --endpoint URL --model NAME"
        )
        raise typer.Exit(2)
    run_dir = Path(target)
    if (run_dir / "config.yaml").exists():
        cfg = _run_config(run_dir, overrides)
    else:
        try:
            check_model(target, field="eval")
        except HubUnavailable as e:
            raise _bad_input(str(e)) from None
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
    folder = records or records_dir(cfg, target, run_dir)
    with _template_errors():
        results = run_eval(cfg, run_dir, k=k, n_tasks=tasks, baselines=baselines, records=folder)
    _print_results(results, out)


def _print_results(results: dict, out: Path | None) -> None:
    for name, value in results.items():
        console.print(
            f"{name:>24}: {value:.3f}" if isinstance(value, float) else f"{name:>24}: {value}"
        )
    if out is not None:
        out.write_text(json.dumps(results, indent=2))
    if "records" in results:
        folder = results["records"]
        console.print(
            f"episodes kept in {folder} (browse: turnrl view {folder})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _run_config(run_dir: Path, overrides: list[str] | None):
    """A run's saved config with ``overrides``; a saved ``model.device`` this machine lacks
    becomes auto (said on the console), so a run trained on a GPU evaluates and exports here."""
    from turnrl.run.rundir import run_config

    cfg, note = run_config(run_dir, overrides or [])
    if note:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    return cfg


def _eval_endpoint(
    endpoint, model, target, overrides, k, tasks, baselines, out, records, **sampling
):
    from turnrl.run.commands import OpenAIChat, OpenAIError
    from turnrl.run.evaluate import records_dir, run_eval

    # with no run or model to name, the first override lands in TARGET
    cfg = _config(None, [*([target] if target else []), *(overrides or [])])
    try:
        chat = OpenAIChat(model, endpoint, **sampling)
    except ValueError as e:
        console.print(f"[red]--endpoint/--model[/red]: {e}")
        raise typer.Exit(2) from None
    try:
        folder = records or records_dir(cfg, model or "endpoint")
        results = run_eval(
            cfg, None, k=k, n_tasks=tasks, baselines=baselines, chat=chat, records=folder
        )
    except OpenAIError as e:
        console.print(f"[red]endpoint[/red]: {e}")
        raise typer.Exit(1) from None
    _print_results(results, out)


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="a run directory")],
    out: Annotated[Path, typer.Argument(help="where to write the model (must not exist)")],
) -> None:
    """Write a run's latest policy to OUT as a transformers save_pretrained directory (LoRA
    merged), loadable with AutoModelForCausalLM.from_pretrained(OUT)."""
    from turnrl.run.rundir import export_run

    if not (run_dir / "config.yaml").exists():
        console.print(f"[red]{run_dir}[/red]: no config.yaml; not a run directory")
        raise typer.Exit(2)
    if out.exists():
        console.print(f"[red]{out}[/red] already exists; give a new path")
        raise typer.Exit(2)
    cfg = _run_config(run_dir, [])
    console.print(f"written: {export_run(run_dir, out, cfg)}")


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
    from turnrl.run.rundir import find_runs

    try:
        run_dirs = find_runs(runs)
    except ValueError as e:
        console.print(f"[red]turnrl view[/red]: {e}")
        raise typer.Exit(2) from None
    if export is not None:
        from turnrl.run.rundir import export_html

        console.print(str(export_html(run_dirs, export, records_mb=records_mb)))
        return
    from turnrl.run.rundir import make_server

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

    from turnrl.run.rundir import AUDIT_NAME, export_html, is_run, read_audit_c

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
    from turnrl.run.commands import audit as run_audit
    from turnrl.run.commands import parse_kinds
    from turnrl.run.config import parse_overrides

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
    """List the environments (shipped and installed) and the recipes shipped with turnrl."""
    from turnrl.run.commands import env_listing

    shipped, installed, group = env_listing()
    console.print("[bold]environments[/bold] (env.name=NAME)")
    for name, text in shipped:
        console.print(f"  {name:<10} {text}")
    console.print(f"[bold]installed[/bold] (entry points in the group {group!r})")
    for name, target in installed:
        console.print(f"  {name:<10} {target}")
    if not installed:
        console.print("  none")
    console.print("  your own: env.name=pkg.module:Class (see docs/envs.md)")
    console.print("[bold]recipes[/bold] (turnrl train recipe=NAME)")
    for name in recipe_names():
        console.print(f"  {name}")


@app.command()
def doctor(
    env: Annotated[str, typer.Argument(help="an env name, entry point or pkg.module:Class")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="env.* and rollout.max_turns overrides, e.g. env.tasks=tasks.jsonl"),
    ] = None,
    tasks: Annotated[int, typer.Option(min=1, help="tasks to play scripted agents on")] = 4,
) -> None:
    """Check an env before training: tool schemas, the reset/step/grade contract, the expert,
    do-nothing and random agents near 0, deterministic replay, grade never raising, timings."""
    from turnrl.run.commands import doctor as run_doctor

    cfg = _config(None, [f"env.name={env}", "sft.enabled=false", *(overrides or [])])
    if not run_doctor(cfg, tasks, console):
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
