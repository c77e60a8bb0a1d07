"""EAGLE-3 heads (vLLM's ``method: eagle3``) trained on their target's own hidden states.

A head is speculators' ``Eagle3DraftModel`` (one decoder layer over the target's fused low,
middle and high hidden states and the embedding of the token just emitted), trained with
EAGLE-3's training-time test in a small CPU loop around that class (speculators' trainer
assumes CUDA); ``save_pretrained`` writes the format vLLM loads. Options: docs/USAGE.md.
:func:`build` is the trainer of :mod:`harness.speculators.eagle3` (its ``trained_by``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.config import ConfigError, check
from harness.files import atomic_dir
from harness.manifest import Manifest, data_hash, weights_digest, write_manifest
from harness.speculators.eagle3 import FAMILY
from train.config import TrainConfig
from train.distil import distilled
from train.steps import Built, TrainedTarget, cached, flat


@dataclass
class Settings:
    """The train config's ``eagle3`` section: heads of the trained targets, on their
    distilled answers (null = no heads are built)."""

    layers: int = 1  # decoder layers of the head
    ttt_steps: int = 3  # draft steps unrolled per position in training (the training-time test)
    layer_ids: list[int] | None = None  # the 3 target layers fused; null = low, middle, high
    draft_vocab_size: int | None = None  # the target's most frequent answer tokens; null = all
    answers: int | None = None  # train problems answered per style; null = distil.max_problems
    # the folder the heads go into, as eagle3_<style> (heads of several recipes side by
    # side); null = the experiment's models.drafts.eagle3_<style>
    out_dir: str | None = None
    max_steps: int = 300
    batch_size: int = 8  # answers per step
    learning_rate: float = 1.0e-3
    max_length: int = 1024  # tokens of prompt + answer
    logging_steps: int = 50
    seed: int = 0


def validate(e: Settings) -> None:
    """Range checks of the ``eagle3`` section that types cannot express."""
    check(e.layers >= 1, "eagle3.layers", e.layers, "must be >= 1")
    check(e.ttt_steps >= 1, "eagle3.ttt_steps", e.ttt_steps, "must be >= 1")
    check(e.max_steps >= 1, "eagle3.max_steps", e.max_steps, "must be >= 1")
    check(e.layer_ids is None or len(set(e.layer_ids)) == 3, "eagle3.layer_ids", e.layer_ids,
          "must be 3 distinct layers (vLLM's EAGLE-3 head fuses three)")  # fmt: skip
    check(e.draft_vocab_size is None or e.draft_vocab_size >= 2, "eagle3.draft_vocab_size",
          e.draft_vocab_size, "must be >= 2 or null")  # fmt: skip


@dataclass(frozen=True)
class Sequence:
    """One answer as the head trains on it: token ids, the target's fused hidden states at
    ``layer_ids`` and its last hidden state before the final norm, and which positions
    belong to the answer (the loss covers only those)."""

    input_ids: Any  # [L] long
    aux: Any  # [L, len(layer_ids) * hidden]
    last: Any  # [L, hidden]
    answer: Any  # [L] bool


@dataclass(frozen=True)
class HeadResult:
    """What a finished run reports: steps, last loss, per-step accuracy on held-back answers
    (the fraction of positions where the head's greedy draft equals the target's next
    token, conditioned on every earlier draft step being right, as a verify step needs)."""

    steps: int
    final_loss: float
    accuracy: list[float]
    train_seconds: float


def layer_ids(num_layers: int, settings: Settings) -> list[int]:
    """The three target layers whose inputs the head fuses (id ``i``: the input of layer
    ``i`` as vLLM counts, ``n``: the last layer's output): ``settings.layer_ids``, or low,
    middle and high as speculators picks them (``[2, n // 2, n - 3]``), spread over a
    target of fewer than 6 layers, where those coincide."""
    if settings.layer_ids:
        return list(settings.layer_ids)
    n = num_layers
    if n < 2:
        raise ConfigError(
            f"eagle3: the target has {n} layer; a head fuses 3 distinct layer ids of 0..{n} "
            "(set eagle3=null for this experiment)"
        )
    if n >= 6:
        return [2, n // 2, n - 3]
    return [1, n // 2, n - 1] if n >= 4 else list(range(n - 2, n + 1))


def target_features(
    target_dir: str, rows: list[dict], ids: list[int], max_length: int
) -> list[Sequence]:
    """The target's hidden states on each row's prompt (as the harness sends it) followed by
    its answer; rows longer than ``max_length`` tokens are cut."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from harness.console import progress
    from harness.data.prompts import prompt_token_ids
    from harness.speculators.eagle3 import hidden_states

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    out = []
    bar = progress(len(rows), desc="target features", unit="answer")
    for row in rows:
        prompt = prompt_token_ids(tokenizer, row["prompt"])
        answer = tokenizer(row["completion"][0]["content"], add_special_tokens=False)
        tokens = (prompt + answer["input_ids"] + [tokenizer.eos_token_id])[:max_length]
        aux, last = hidden_states(model, tokens, ids)
        is_answer = torch.zeros(len(tokens), dtype=torch.bool)
        is_answer[len(prompt) :] = True
        out.append(Sequence(torch.tensor(tokens), aux, last, is_answer))
        bar.update()
    bar.close()
    return out


def draft_vocab(sequences: list[Sequence], size: int, vocab_size: int) -> tuple[Any, Any]:
    """``(t2d, d2t)`` for a draft vocabulary of the ``size`` tokens the target emits most
    often in its answers (ties by token id; rarer tokens are padded in by id)."""
    import torch

    counts: Counter[int] = Counter()
    for s in sequences:
        counts.update(s.input_ids[s.answer].tolist())
    ranked = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:size]
    ranked += [t for t in range(vocab_size) if t not in set(ranked)][: size - len(ranked)]
    keep = torch.tensor(sorted(ranked))
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[keep] = True
    return t2d, keep - torch.arange(size)


def pack(sequences: list[Sequence]) -> dict[str, Any]:
    """One training batch: the sequences concatenated, each shifted so that position ``t``
    holds token ``t + 1`` with the hidden state that predicted it (speculators'
    ``shift_batch``), kept apart by document ids."""
    import torch

    parts = [
        (s.input_ids[1:], s.aux[:-1], s.last[1:], s.answer[1:], torch.arange(1, len(s.input_ids)))
        for s in sequences
    ]
    ids, aux, last, mask, pos = (torch.cat(p) for p in zip(*parts, strict=True))
    docs = torch.cat([torch.full((len(p[0]),), i) for i, p in enumerate(parts)])
    return {
        "input_ids": ids[None],
        "hidden_states": aux[None],
        "verifier_last_hidden_states": last[None],
        "loss_mask": mask[None],
        "position_ids": pos[None],
        "document_ids": docs[None],
    }


def new_head(target_dir: str, ids: list[int], settings: Settings, vocab: tuple | None) -> Any:
    """An untrained head for ``target_dir``: Llama decoder layers shaped like the target's,
    its embeddings, LM head and final norm copied from the target (kept frozen)."""
    from speculators.models.eagle3 import Eagle3DraftModel
    from transformers import AutoConfig, LlamaConfig

    t = AutoConfig.from_pretrained(target_dir)
    layer = LlamaConfig(
        hidden_size=t.hidden_size,
        intermediate_size=t.intermediate_size,
        num_attention_heads=t.num_attention_heads,
        num_key_value_heads=t.num_key_value_heads,
        head_dim=getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
        rms_norm_eps=t.rms_norm_eps,
        vocab_size=t.vocab_size,
        max_position_embeddings=t.max_position_embeddings,
        rope_parameters=t.rope_parameters,
        num_hidden_layers=settings.layers,
        tie_word_embeddings=False,
    )
    t2d, d2t = vocab if vocab else (None, None)
    return Eagle3DraftModel.from_training_args(
        layer,
        t2d=t2d,
        d2t=d2t,
        verifier_name_or_path=target_dir,
        draft_vocab_size=len(d2t) if vocab else t.vocab_size,
        norm_before_residual=True,
        ttt_steps=settings.ttt_steps,
        target_layer_ids=ids,
        draft_attn_impl="sdpa",
    )


def _kl() -> Any:
    """The forward KL to the target, eager (speculators' default is a fused Triton kernel)."""
    from speculators.losses.utils import resolve_loss_config

    return resolve_loss_config("kl_div", "eager")


def accuracy(head: Any, sequences: list[Sequence], ttt_steps: int) -> list[float]:
    """Conditional greedy accuracy of each draft step over ``sequences``' answer positions."""
    import torch

    correct, total = [0.0] * ttt_steps, [0.0] * ttt_steps
    head.eval()
    with torch.no_grad():
        for start in range(0, len(sequences), 8):
            batch = pack(sequences[start : start + 8])
            _, _, metrics = head(**batch, ttt_steps=ttt_steps, loss_config=_kl())
            for k in range(ttt_steps):
                correct[k] += float(metrics[f"cond_acc_{k}_sum"])
                total[k] += float(metrics[f"cond_acc_{k}_total"])
    head.train()
    return [c / t if t else 0.0 for c, t in zip(correct, total, strict=True)]


def train_head(
    target_dir: str, rows: list[dict], settings: Settings, out_dir: str | Path
) -> HeadResult:
    """Train an EAGLE-3 head for ``target_dir`` on its own answers ``rows`` (prompt-completion
    chats) and save it to ``out_dir``; a tenth of the rows (at most 50) is held back to
    measure per-step accuracy."""
    import torch
    from transformers import AutoConfig, get_cosine_schedule_with_warmup

    from harness.console import progress

    torch.manual_seed(settings.seed)
    ids = layer_ids(AutoConfig.from_pretrained(target_dir).num_hidden_layers, settings)
    sequences = target_features(target_dir, rows, ids, settings.max_length)
    held = max(1, min(50, len(sequences) // 10))
    train, val = sequences[held:], sequences[:held]
    vocab_size = AutoConfig.from_pretrained(target_dir).vocab_size
    vocab = (
        draft_vocab(train, settings.draft_vocab_size, vocab_size)
        if settings.draft_vocab_size and settings.draft_vocab_size < vocab_size
        else None
    )
    head = new_head(target_dir, ids, settings, vocab).train()
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.learning_rate)
    schedule = get_cosine_schedule_with_warmup(
        optimizer, int(0.05 * settings.max_steps), settings.max_steps
    )
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(settings.seed))
    start, loss = time.perf_counter(), float("nan")
    bar = progress(settings.max_steps, desc="eagle3 head", unit="step")
    for step in range(settings.max_steps):
        at = (step * settings.batch_size) % len(train)
        batch = [train[int(i)] for i in order[at : at + settings.batch_size]]
        _, total, _ = head(**pack(batch), ttt_steps=settings.ttt_steps, loss_config=_kl())
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        loss = float(total.detach()) / settings.ttt_steps
        bar.update()
        if (step + 1) % settings.logging_steps == 0:
            bar.write(f"[eagle3] step {step + 1}: loss {loss:.3f}")
    bar.close()
    seconds = time.perf_counter() - start
    head.save_pretrained(str(out_dir))
    return HeadResult(settings.max_steps, loss, accuracy(head, val, settings.ttt_steps), seconds)


def built_head(
    cfg: TrainConfig, role: str, target: Built, answers: list[dict], out_dir: str
) -> Built:
    """An EAGLE-3 head for ``target`` trained on its own ``answers`` into ``out_dir``, unless
    a build with the same key is there."""
    config = asdict(cfg.eagle3) | {"threads": cfg.threads}
    # which answers: in the key as their data hash; where the head goes is not what it is
    del config["answers"], config["out_dir"]
    built, current = cached(role, target, answers, config, out_dir)
    if current:
        return built
    print(f"[build] {role}: training on {len(answers)} answers of {target.path}", flush=True)
    start = time.perf_counter()
    with atomic_dir(out_dir) as tmp:
        result = train_head(target.path, answers, cfg.eagle3, tmp)
        write_manifest(tmp, Manifest(
            role=role, method=FAMILY.method, trained_from=target.path, key=built.key,
            data_hash=data_hash(answers), config=config, steps=result.steps,
            final_loss=result.final_loss, eval_loss=None,
            train_seconds=round(result.train_seconds, 1), examples=len(answers),
            weights=weights_digest(tmp), eval_accuracy=[round(a, 4) for a in result.accuracy],
        ))  # fmt: skip
    per_step = ", ".join(f"{a:.2f}" for a in result.accuracy)
    print(f"[build] {role}: {result.steps} steps, loss {result.final_loss:.3f}, held-back "
          f"accuracy per draft step {per_step}, {time.perf_counter() - start:.0f} s -> {out_dir}",
          flush=True)  # fmt: skip
    return built


def build(target: TrainedTarget) -> dict[str, str]:
    """The head of ``target``, ``eagle3_<style>``, when the train config has ``eagle3``."""
    cfg = target.cfg
    if cfg.eagle3 is None:
        return {}
    role = f"eagle3_{target.style}"
    cap = cfg.eagle3.answers or cfg.distil.max_problems  # the drafts' answers: cached
    rows = distilled(cfg, target.model, target.style, flat(target.rows, cap))
    out = f"{cfg.eagle3.out_dir}/{role}" if cfg.eagle3.out_dir else target.drafts[role]
    return {role: built_head(cfg, role, target.model, rows, out).path}
