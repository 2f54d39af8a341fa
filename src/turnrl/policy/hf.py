"""The transformers backend: batched sampling from token ids, and scoring for training.

Sampling runs its own decode loop over a KV cache instead of ``model.generate`` so that the
logprob reported for each token is exactly ``log_softmax(logits / temperature)`` at that token
(the quantity the trainer recomputes), before top-p truncation. Top-p only decides which token
is drawn.

Prefix caching: an episode's next prompt is its last prompt plus the sampled ids plus the
observation delta, so re-prefilling the whole context every turn is wasted work. After each
generation the KV of every row's full sequence is kept (``PrefixCache``); a new prompt that
extends a kept sequence prefills only the new suffix. Reuse is found purely from token
prefixes, so the batcher and agent loop need not know about it. Any change to the weights
(``version`` or an in-place parameter update) empties the cache.

The decode loop writes into a preallocated ``StaticCache`` (sized prompt + max_new_tokens)
rather than a ``DynamicCache``, which copies the whole KV on every step. Models whose layers
are not all plain full-attention layers (sliding window, linear attention) fall back to the
model's own cache, without prefix reuse.

The decode loop keeps per-step work on tensors (on a small model the Python and allocation
around each forward is a good part of the time): sampled ids and logprobs go to
preallocated [B, N] buffers read once at the end; the rows are sampled by one batched argmax
over the random draws a ``torch.multinomial`` call per row would make (so a seed gives the
same tokens as before); with sdpa the attention mask is passed as a ready boolean view,
updated one column per step, rather than rebuilt by transformers every step.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.cache_utils import StaticCache, StaticLayer

from turnrl.algo.losses import sequence_logprobs
from turnrl.policy.base import Generation, SamplingParams


@dataclass
class CachedPrefix:
    """A finished sequence's KV, left where its generation wrote it: row ``row`` of ``cache``,
    the positions of ``spans`` in order (its cached part, then what that call prefilled and
    decoded). Not copied out, since copying every row's KV after every call cost a fifth of
    sampling; the generation's cache lives as long as one of its rows is kept."""

    tokens: list[int]  # [T]
    cache: StaticCache
    row: int
    spans: tuple[tuple[int, int], ...]  # (start, end) positions, their lengths summing to T


@dataclass
class _Prefilled:
    """A batch right after its prompts went through the model, ready to decode."""

    cache: StaticCache | None  # None where the model keeps its own kind of cache
    logits: torch.Tensor  # [B, V] at each row's last prompt token
    visible: torch.Tensor  # [B, cache length] bool, the positions each row attends to
    next_pos: torch.Tensor  # [B, 1] position id of each row's next token
    c: list[int]  # [B] prompt tokens taken from the prefix cache
    d: list[int]  # [B] prompt tokens run through the model


class PrefixCache:
    """KV of finished sequences, found by token prefix, capped at ``max_tokens`` in total.

    Entries are bucketed by their first ``key_len`` tokens (shorter sequences are not kept).
    A hit is removed (its episode's next generation stores the extension); the least recently
    stored entries go first when the budget is exceeded.
    """

    def __init__(self, max_tokens: int, key_len: int = 32) -> None:
        self.max_tokens = max_tokens
        self.key_len = key_len
        self.tokens = 0  # sum of len(entry.tokens) over kept entries
        self.hits = 0
        self.reused_tokens = 0
        self.weights_key: tuple | None = None
        self._entries: OrderedDict[int, CachedPrefix] = OrderedDict()  # oldest first
        self._buckets: dict[tuple[int, ...], set[int]] = {}
        self._next_id = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._buckets.clear()
        self.tokens = 0

    def longest_prefix(self, prompt: list[int]) -> int | None:
        """Id of the longest kept sequence that is a prefix of ``prompt`` (None if none)."""
        best, best_len = None, 0
        for i in self._buckets.get(tuple(prompt[: self.key_len]), ()):
            t = self._entries[i].tokens
            if best_len < len(t) <= len(prompt) and prompt[: len(t)] == t:
                best, best_len = i, len(t)
        return best

    def get(self, entry_id: int) -> CachedPrefix:
        return self._entries[entry_id]

    def pop(self, entry_id: int) -> CachedPrefix | None:
        entry = self._entries.pop(entry_id, None)
        if entry is not None:
            key = tuple(entry.tokens[: self.key_len])
            self._buckets[key].discard(entry_id)
            if not self._buckets[key]:
                del self._buckets[key]
            self.tokens -= len(entry.tokens)
        return entry

    def fits(self, tokens: list[int]) -> bool:
        """Whether ``put`` would keep a sequence of these tokens."""
        return self.key_len <= len(tokens) <= self.max_tokens

    def put(self, entry: CachedPrefix) -> None:
        tokens = entry.tokens
        if not self.fits(tokens):
            return
        while self.tokens + len(tokens) > self.max_tokens:
            self.pop(next(iter(self._entries)))
        entry_id, self._next_id = self._next_id, self._next_id + 1
        self._entries[entry_id] = entry
        self._buckets.setdefault(tuple(tokens[: self.key_len]), set()).add(entry_id)
        self.tokens += len(tokens)


class HFPolicy:
    """A causal LM from transformers used as the rollout sampler.

    ``lock`` serialises sampling against weight updates: the trainer takes it while it steps
    the optimizer so that no batch is sampled from half-updated weights.

    ``prefix_cache_tokens`` caps the tokens whose KV is kept between generations (0 disables
    prefix caching). A kept sequence's KV stays in the cache its generation filled, which is
    freed when none of its rows is kept any more: memory is about one batch's cache per turn
    in flight (SmolLM2-135M: 46 KB per position in float32, 32 rows of 700 positions 1 GB).

    ``autocast``: sample under ``torch.autocast`` to this dtype (bf16), as the trainer computes
    under ``trainer.mixed_precision``, so the behaviour logprobs come from the same arithmetic
    as the trainer's (on a CPU with bf16 instructions about 1.5x faster than float32).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        pad_token_id: int,
        max_batch_size: int = 64,
        prefix_cache_tokens: int = 32768,
        autocast: torch.dtype | None = None,
    ) -> None:
        self.model = model
        self.autocast = autocast
        self.pad_token_id = pad_token_id
        self.max_batch_size = max_batch_size
        self.version = 0
        self.lock = threading.Lock()
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self._static_ok: bool | None = None  # can this model decode into a StaticCache?

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[Generation]:
        """Sample a continuation of every prompt. Each row draws from its own generator seeded
        by ``seeds[i]``, so a row's sample does not depend on which rows share its batch."""
        if seeds is None:
            seeds = [int(torch.randint(0, 2**31 - 1, ())) for _ in prompts]
        gens = [torch.Generator().manual_seed(s) for s in seeds]
        out: list[Generation] = []
        for i in range(0, len(prompts), self.max_batch_size):
            chunk = slice(i, i + self.max_batch_size)
            with self.lock, self._precision():
                out.extend(self._generate(prompts[chunk], params, gens[chunk]))
        return out

    def _precision(self) -> contextlib.AbstractContextManager:
        """Autocast to ``autocast`` (the trainer's mixed precision), else nothing."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast)

    def _weights_key(self) -> tuple:
        """Changes whenever the weights may have: a new version, an in-place update of any
        parameter (optimizer step, ``load_state_dict``), or a move to other storage."""
        params = list(self.model.parameters())
        first = params[0]
        return (self.version, sum(p._version for p in params), first.data_ptr(), first.dtype)

    def _take_prefixes(self, prompts: list[list[int]]) -> list[CachedPrefix | None]:
        """The cached prefix each prompt extends (or None); hits leave the cache."""
        cache = self.prefix_cache
        if cache.max_tokens <= 0 or not self._static_cache_ok():
            return [None] * len(prompts)
        self._forget_stale()
        ids = [cache.longest_prefix(p) for p in prompts]
        hits = [None if i is None else cache.get(i) for i in ids]
        for i in set(ids) - {None}:
            cache.pop(i)
        return hits

    def _forget_stale(self) -> None:
        """Empty the prefix cache if the weights changed since its entries were made."""
        key = self._weights_key()
        if key != self.prefix_cache.weights_key:
            self.prefix_cache.clear()
            self.prefix_cache.weights_key = key

    def _static_cache_ok(self) -> bool:
        if self._static_ok is None:
            ok = getattr(self.model, "_can_compile_fullgraph", False)
            layers = StaticCache(config=self.model.config, max_cache_len=1).layers if ok else []
            self._static_ok = bool(ok) and all(type(layer) is StaticLayer for layer in layers)
        return self._static_ok

    def _new_cache(
        self, hits: list[CachedPrefix | None], c: list[int], length: int
    ) -> StaticCache | None:
        """A cache with room for ``length`` positions whose row b starts as [left pad][the
        first c[b] cached positions of hits[b]]; None where the model needs its own kind."""
        if not self._static_cache_ok():
            return None
        cache = StaticCache(config=self.model.config, max_cache_len=length)
        C = max(c)
        if C > 0:
            ref = next(h for h in hits if h is not None).cache.layers[0]
            # only the buffers' sizes and dtypes are read (under autocast the keys, through
            # the rotary embedding, are float32 and the values bf16)
            k = ref.keys.new_empty((len(hits), ref.keys.shape[1], 0, ref.keys.shape[3]))
            v = ref.values.new_empty((len(hits), ref.values.shape[1], 0, ref.values.shape[3]))
            # Written in place, one copy per row, layer and span (no staging buffer).
            for layer, ly in enumerate(cache.layers):
                ly.lazy_initialization(k, v)
                for b, h in enumerate(hits):
                    if h is None or c[b] == 0:
                        continue
                    src, at = h.cache.layers[layer], C - c[b]
                    for start, end in h.spans:
                        n = min(end - start, C - at)
                        if n <= 0:
                            continue
                        ly.keys[b, :, at : at + n] = src.keys[h.row, :, start : start + n]
                        ly.values[b, :, at : at + n] = src.values[h.row, :, start : start + n]
                        at += n
                ly.cumulative_length.fill_(C)
        return cache

    def _share_prompts(self, prompts: list[list[int]]) -> None:
        """Rows with the same prompt and no kept prefix (a task group's first turn: one
        prompt, ``group_size`` rows) get it prefilled once: its KV, all but the last token, is
        kept in the prefix cache, so each row then prefills one token instead of the prompt."""
        cache = self.prefix_cache
        if cache.max_tokens <= 0 or not self._static_cache_ok():
            return
        self._forget_stale()
        rows: dict[tuple[int, ...], int] = {}
        for p in prompts:
            if len(p) > cache.key_len:
                rows[tuple(p)] = rows.get(tuple(p), 0) + 1
        shared = [list(p[:-1]) for p, n in rows.items() if n > 1]
        shared = [p for p in shared if cache.longest_prefix(p) is None and cache.fits(p)]
        if shared:
            pre = self._prefill(shared, extra=0)
            if isinstance(pre.cache, StaticCache):
                self._keep(shared, [[] for _ in shared], pre.cache, pre.c, pre.d)

    def _prefill(self, prompts: list[list[int]], extra: int) -> _Prefilled:
        """Run each prompt's uncached suffix (its cached prefix, if any, comes from the prefix
        cache) through the model, into a cache with room for ``extra`` more positions."""
        B, device = len(prompts), self.device
        hits = self._take_prefixes(prompts)
        # Row b: c[b] cached tokens (at least one token is always prefilled, for its logits).
        c = [0 if h is None else min(len(h.tokens), len(p) - 1) for h, p in zip(hits, prompts)]
        d = [len(p) - cb for p, cb in zip(prompts, c)]
        C, D = max(c), max(d)
        self.prefix_cache.hits += sum(cb > 0 for cb in c)
        self.prefix_cache.reused_tokens += sum(c)
        # Row b of the KV and mask: [pad][c[b] cached][pad][d[b] suffix][decoded]; the holes
        # are masked, so each row's next token sits at the last position.
        input_ids = torch.full((B, D), self.pad_token_id, dtype=torch.long)  # [B, D]
        visible = torch.zeros((B, C + D + extra), dtype=torch.bool)  # [B, C + D + extra]
        for b, p in enumerate(prompts):
            input_ids[b, D - d[b] :] = torch.tensor(p[c[b] :], dtype=torch.long)
            visible[b, C - c[b] : C] = True
            visible[b, C + D - d[b] : C + D] = True
        input_ids, visible = input_ids.to(device), visible.to(device)
        positions = (visible[:, : C + D].long().cumsum(-1) - 1).clamp(min=0)[:, C:]  # [B, D]
        out = self.model(
            input_ids=input_ids,
            attention_mask=visible[:, : C + D].long(),
            position_ids=positions,
            cache=self._new_cache(hits, c, C + D + extra),
            use_cache=True,
            logits_to_keep=1,
        )
        logits = out.logits[:, -1, :].float()  # [B, V]
        return _Prefilled(out.cache, logits, visible, positions[:, -1:] + 1, c, d)

    @torch.inference_mode()
    def _generate(
        self, prompts: list[list[int]], params: SamplingParams, gens: list[torch.Generator]
    ) -> list[Generation]:
        B, N = len(prompts), params.max_new_tokens
        device = self.device
        was_training = self.model.training
        self.model.eval()
        self._share_prompts(prompts)
        # The prefill writes C + D positions, each decode step but the last writes one.
        pre = self._prefill(prompts, extra=max(N - 1, 0))
        cache, logits, visible, next_pos = pre.cache, pre.logits, pre.visible, pre.next_pos
        T = max(pre.c) + max(pre.d)  # where the first decoded position goes
        draws = torch.empty((B, logits.shape[-1]))  # [B, V], refilled every step
        stop = torch.tensor(params.stop_token_ids, device=device) if params.stop_token_ids else None
        tokens = torch.zeros((B, N), dtype=torch.long, device=device)  # [B, N]
        logps = torch.zeros((B, N), device=device)  # [B, N]
        done = torch.zeros(B, dtype=torch.bool, device=device)  # [B]
        # sdpa takes a boolean [B, 1, 1, length] mask as is: a view of ``visible`` whose next
        # column is set each step, instead of transformers rebuilding the mask every step.
        direct_mask = (
            isinstance(cache, StaticCache) and self.model.config._attn_implementation == "sdpa"
        )
        steps = 0
        for step in range(N):
            noise = draw_noise(draws, gens).to(device) if params.temperature > 0 else None
            token, logp = sample_next(logits, params.temperature, params.top_p, noise)
            tokens[:, step], logps[:, step] = token, logp
            steps = step + 1
            if stop is not None:
                done |= torch.isin(token, stop)
                if bool(done.all()):
                    break
            if step == N - 1:
                break
            visible[:, T + step] = ~done
            mask = visible[:, None, None, :] if direct_mask else visible[:, : T + step + 1].long()
            out = self.model(
                input_ids=token.unsqueeze(1),
                attention_mask=mask,
                position_ids=next_pos,
                cache=cache,
                use_cache=True,
            )
            cache = out.cache
            logits = out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        self.model.train(was_training)
        # Each row ends at its first stop token (included), else after ``steps`` tokens.
        tokens, logps = tokens[:, :steps], logps[:, :steps]
        if stop is None:
            n_kept, stopped = [steps] * B, [False] * B
        else:
            hit = torch.isin(tokens, stop)  # [B, steps]
            first = torch.where(hit.any(-1), hit.int().argmax(-1) + 1, steps)  # [B]
            n_kept, stopped = first.tolist(), hit.any(-1).tolist()
        sampled = [row[:n] for row, n in zip(tokens.tolist(), n_kept)]
        logprobs = [row[:n] for row, n in zip(logps.tolist(), n_kept)]
        if self.prefix_cache.max_tokens > 0 and isinstance(cache, StaticCache):
            self._keep(prompts, sampled, cache, pre.c, pre.d)
        return [Generation(sampled[b], logprobs[b], stopped[b], self.version) for b in range(B)]

    def _keep(
        self,
        prompts: list[list[int]],
        sampled: list[list[int]],
        cache: StaticCache,
        c: list[int],
        d: list[int],
    ) -> None:
        """Keep each row's KV for prompt + sampled ids (all but the last sampled id, which
        was never fed to the model): where this call's cache holds it, around the pad holes."""
        C, D = max(c), max(d)
        for b, p in enumerate(prompts):
            n = max(len(sampled[b]) - 1, 0)
            spans = ((C - c[b], C), (C + D - d[b], C + D + n))
            self.prefix_cache.put(CachedPrefix(p + sampled[b][:n], cache, b, spans))

    def score(self, sequences: list[list[int]], temperature: float = 1.0) -> list[list[float]]:
        """Per-token logprobs of given sequences; entry t is log p(x_t | x_<t), entry 0 is 0."""
        with torch.no_grad(), self._precision():
            ids, mask = pad_right(sequences, self.pad_token_id, self.device)
            logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
            lp = sequence_logprobs(logits, ids, temperature=temperature)  # [B, T]
        return [lp[b, : len(s)].tolist() for b, s in enumerate(sequences)]


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float, noise: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row (greedy when temperature <= 0, which needs no ``noise``).
    ``noise`` [B, V] holds Exp(1) draws; argmax(p / noise) is a
    sample from p (the exponential form of the Gumbel-max trick), and it is what
    ``torch.multinomial(p, 1)`` computes from the same draws, so one batched argmax gives the
    samples that a multinomial call per row would. Returns (token [B],
    log_softmax(logits/T)[token] [B])."""
    if temperature <= 0:
        logprobs = F.log_softmax(logits, dim=-1)  # greedy: report the untempered logprob
        token = logits.argmax(-1)
        return token, logprobs.gather(-1, token[:, None]).squeeze(-1)
    logprobs = F.log_softmax(logits / temperature, dim=-1)  # [B, V]
    probs = logprobs.exp()
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p  # always keeps the top token
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p * keep)
    token = (probs / noise).argmax(-1)  # [B]
    return token, logprobs.gather(-1, token[:, None]).squeeze(-1)


def draw_noise(noise: torch.Tensor, gens: list[torch.Generator]) -> torch.Tensor:
    """Fill row b of ``noise`` [B, V] (on the CPU, where the generators are) with Exp(1) draws
    from ``gens[b]``: the draws ``torch.multinomial`` would take, in the same order."""
    for row, g in zip(noise, gens):
        row.exponential_(generator=g)
    return noise


def pad_right(
    seqs: list[list[int]] | list[list[float]],
    pad_id: float,
    device: torch.device,
    dtype: torch.dtype = torch.long,
) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=dtype)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s, dtype=dtype)
        mask[b, : len(s)] = 1
    return ids.to(device), mask.to(device)


def shared_prefix_length(ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """How many leading tokens every row has in common (at most T - 1)."""
    same = (ids == ids[:1]).all(0) & (attention_mask == 1).all(0)  # [T]
    p = ids.shape[1] if bool(same.all()) else int(same.int().argmin())
    return min(p, ids.shape[1] - 1)


def shared_prefix_logits(
    model: torch.nn.Module, ids: torch.Tensor, attention_mask: torch.Tensor, min_prefix: int = 32
) -> torch.Tensor:
    """``model(ids, attention_mask).logits`` [B, T, V] for right-padded rows, computing the
    tokens every row starts with (the system prompt and tool list, about half of a short
    episode) once instead of B times. Gradients flow through the shared part as usual.

    Falls back to the plain forward when the shared prefix is shorter than ``min_prefix`` or
    the model's cache is not the plain per-layer kind."""
    B, T = ids.shape
    p = shared_prefix_length(ids, attention_mask)
    if B > 1 and p >= min_prefix:
        head = model(input_ids=ids[:1, :p], use_cache=True)
        cache = head.cache
        if hasattr(cache, "batch_repeat_interleave"):
            cache.batch_repeat_interleave(B)
            tail = model(
                input_ids=ids[:, p:],
                attention_mask=attention_mask,
                cache=cache,
                position_ids=torch.arange(p, T).unsqueeze(0).expand(B, -1),
            ).logits
            return torch.cat([head.logits.expand(B, -1, -1), tail], dim=1)
    return model(input_ids=ids, attention_mask=attention_mask).logits


def pack_rows(lengths: list[int], width: int) -> list[list[int]]:
    """First-fit decreasing: the indices of ``lengths`` grouped into rows of at most ``width``
    tokens each, longest first (at most 11/9 of the optimal number of rows)."""
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = next((r for r, f in enumerate(free) if f >= lengths[i]), len(rows))
        if r == len(rows):
            rows.append([])
            free.append(width)
        rows[r].append(i)
        free[r] -= lengths[i]
    return rows


def packed_logits(
    model: torch.nn.Module, ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """``model(ids, attention_mask).logits`` [B, T, V] for right-padded rows, without computing
    most of the padding: the rows are laid end to end into as few rows of T tokens as they fit
    (``pack_rows``), each sequence attending only to itself (a block-diagonal causal mask) with
    positions restarting at 0, so every token sees exactly what it saw in its own row. Logits
    at padded positions are 0. Worth it when lengths vary: a batch of 16 user-env demos is 39 %
    padding."""
    B, T = ids.shape
    lengths = attention_mask.sum(1).tolist()
    rows = pack_rows(lengths, T)
    width = max(sum(lengths[i] for i in row) for row in rows)
    packed = torch.zeros((len(rows), width), dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    # segment of each packed token: its sequence, or -1 - t for padding (attends to itself only)
    segment = -1 - torch.arange(width).repeat(len(rows), 1)
    src, dst = [], []
    for r, row in enumerate(rows):
        at = 0
        for i in row:
            n = lengths[i]
            packed[r, at : at + n] = ids[i, :n]
            positions[r, at : at + n] = torch.arange(n)
            segment[r, at : at + n] = i
            src.append(torch.arange(r * width + at, r * width + at + n))
            dst.append(torch.arange(i * T, i * T + n))
            at += n
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    allowed = (segment[:, :, None] == segment[:, None, :]) & causal  # [R, W, W]
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    device = ids.device
    logits = model(
        input_ids=packed.to(device),
        attention_mask=mask[:, None].to(device),
        position_ids=positions.to(device),
    ).logits  # [R, W, V]
    flat = logits.reshape(-1, logits.shape[-1])
    src_i, dst_i = torch.cat(src).to(device), torch.cat(dst).to(device)
    out = flat.new_zeros((B * T, flat.shape[-1])).index_copy(0, dst_i, flat[src_i])
    return out.view(B, T, -1)
