"""The tiny default model: a byte-level BPE trained here and a few-million-parameter Llama.

Nothing is downloaded: the tokenizer is trained on the environments' own text, so tool names,
tags and code tokens are single tokens and a 2048-token context holds an easy episode.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<|pad|>", "<|im_start|>", "<|im_end|>"]
# Frequent structural strings become single (non-special) tokens: the tags and the JSON frame
# of a compact Hermes tool call, ``<tool_call>{"name":"NAME","arguments":{...}}</tool_call>``
# (byte-level BPE cannot merge across punctuation, so without these the frame alone costs a
# tiny model ~10 tokens to learn per call).
ADDED_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    '<tool_call>{"name":"',
    '","arguments":{',
    "}}</tool_call>",
    '"}}</tool_call>',
]


def tool_call_tokens(tools: list[dict]) -> list[str]:
    """Single tokens for the env's tool names and the JSON frame around each argument
    (``"path":"`` and ``","path":"``; ``"hour":`` and ``","hour":`` for numbers), so an
    argument's value is tokenized on its own: the ``" -"`` the model writes in ``"old":" -"`` is
    then the token it read in ``a - b``."""
    tokens = []
    for t in tools:
        tokens.append(t["function"]["name"])
        for p, spec in t["function"].get("parameters", {}).get("properties", {}).items():
            if spec.get("type") in ("integer", "number", "boolean"):  # no quote opens the value
                tokens += [f'"{p}":', f'","{p}":', f',"{p}":']
            else:
                tokens += [f'"{p}":"', f'","{p}":"']
    return list(dict.fromkeys(tokens))


# ChatML without the system turn. The tiny model is trained from scratch on one env, where the
# system prompt (instructions and tool list) is the same text in every episode (the tools env
# narrows the list to the task's domains, which the task text names): it tells the model
# nothing new, while its ~250 tokens in front of the task make copying from the task text
# (a file name, an operator) much slower to learn. Real models
# keep their own templates and read the system prompt. The template takes ``tools`` (and leaves
# them out) so the renderer does not append their schemas to the dropped turn.
CHAT_TEMPLATE = (
    "{%- set _ = tools %}"
    "{%- for message in messages if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 2048, extra_tokens: Iterable[str] = ()
) -> PreTrainedTokenizerFast:
    """Byte-level BPE over ``texts`` with the ChatML specials and the tiny chat template;
    ``extra_tokens`` (e.g. the env's tool names) become single tokens too."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<|pad|>",
        eos_token="<|im_end|>",
        bos_token=None,
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.add_tokens(ADDED_TOKENS + [t for t in extra_tokens if t not in ADDED_TOKENS])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_config(
    vocab_size: int, *, hidden_size: int = 256, layers: int = 4, context: int = 4096
) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=3 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        rope_theta=10000.0,
    )


def tiny_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0, **kwargs) -> LlamaForCausalLM:
    import torch

    torch.manual_seed(seed)
    config = tiny_config(len(tokenizer), **kwargs)
    config.pad_token_id = tokenizer.pad_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.bos_token_id = None
    return LlamaForCausalLM(config)


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast.from_pretrained(str(path))
