"""The chat-template contract through the CLI: a model whose template cannot carry token-exact
episodes stops ``check-template``, ``train`` and ``eval`` with one line and exit 2, before any
work (no run directory); a good one passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import LlamaConfig
from typer.testing import CliRunner

from tests.chat_families import template
from turnrl.chat import TemplateError, check_template
from turnrl.cli import app
from turnrl.tiny.model import train_tokenizer


def model_dir(tmp_path: Path, chat_template: str | None) -> Path:
    """A tokenizer directory (ChatML specials) with ``chat_template``; no weights are needed
    because the contract is checked before any are loaded."""
    tok = train_tokenizer(["hello world tool result answer"] * 20, vocab_size=300)
    tok.chat_template = chat_template
    out = tmp_path / "model"
    tok.save_pretrained(out)
    LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    ).save_pretrained(out)
    if chat_template is None:
        for f in ("chat_template.jinja", "chat_template.json"):
            (out / f).unlink(missing_ok=True)
    return out


def run(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    "chat_template, requirement",
    [(None, "has no chat template"), (template("no-tool-role"), "must render system, user")],
    ids=["no-template", "no-tool-role"],
)
def test_a_broken_template_stops_every_command_with_one_line(
    tmp_path, monkeypatch, chat_template, requirement
):
    model = model_dir(tmp_path, chat_template)
    monkeypatch.chdir(tmp_path)
    for args in (
        ("check-template", str(model)),
        ("train", f"model.name={model}", "steps=1", "env.name=guess"),
        ("eval", str(model), "env.name=guess", "--tasks", "1"),
    ):
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and requirement in lines[0], (args, result.output)
        assert lines[0].startswith("chat template: ")
    assert not (tmp_path / "runs").exists()  # nothing was written


def test_a_good_template_passes_and_names_its_format(tmp_path):
    model = model_dir(tmp_path, template("qwen2.5"))
    result = run("check-template", str(model))
    assert result.exit_code == 0, result.output
    assert "chat template ok" in result.output and "HermesToolCallParser" in result.output
    assert run("check-template", str(model), "--tool-format", "nope").exit_code == 2


def test_each_requirement_is_named(tmp_path):
    tok = train_tokenizer(["hello world"] * 20, vocab_size=300)
    cases = {
        # the tool message vanishes
        "must render the tool role": "{% for m in messages if m.role != 'tool' %}"
        "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
        # assistant turns end with a plain newline, not the turn-end token
        "must end with the turn-end token": "{% for m in messages %}"
        "{{ '<|im_start|>' + m.role + '\\n' + m.content + '\\n' }}{% endfor %}",
        # a tool result is written differently depending on what came before it
        "depend only on the new messages": "{% for m in messages %}"
        "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
        "{% if m.role == 'tool' %}{{ loop.index }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    }
    for requirement, chat_template in cases.items():
        tok.chat_template = chat_template
        with pytest.raises(TemplateError, match=requirement):
            check_template(tok)
