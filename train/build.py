"""Build an experiment's models: base models, LoRA targets, distilled drafts.

    python -m train.build                                  # experiment=tiny, into models/tiny/
    python -m train.build experiment=tiny target.max_steps=50 threads=1
    python -m train.build experiment=smollm2 datasets_dir=path/to/datasets   # CPU, about 45 min
    python -m train.build experiment=qwen2.5               # CUDA; after `python -m train.data experiment=qwen2.5`

Config ``conf/train/<experiment>.yaml``. A model whose cache key is unchanged is skipped, and
an interrupted training run resumes; the steps: docs/EXPERIMENTS.md.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.checks import command, config_vocab_size
from harness.config import ConfigError, compose_config
from harness.data import synth
from harness.data.datasets import load_problems
from harness.files import atomic_dir, replace_dir, write_text
from harness.manifest import (
    Manifest,
    build_key,
    data_hash,
    digest,
    is_current,
    read_manifest,
    weights_digest,
    write_manifest,
)
from harness.speculators.eagle3 import FAMILY as EAGLE3
from train.config import STYLES, SFTSettings, TrainConfig, compose_train_config
from train.data import DataLeakError
from train.gguf import SOURCES, convert
from train.teachers.synthetic import solutions


@dataclass(frozen=True)
class Built:
    """A model ready to train from or to serve: a directory (or hub id) and its cache key."""

    path: str
    key: str


@dataclass(frozen=True)
class Experiment:
    """What the benchmark config of the experiment fixes: model paths and system prompts."""

    targets: dict[str, str]
    drafts: dict[str, str]
    prompts: dict[str, str]

    @classmethod
    def load(cls, name: str) -> Experiment:
        cfg = compose_config([f"experiment={name}"])
        return cls(dict(cfg.models.targets), dict(cfg.models.drafts), dict(cfg.prompts))


# ----------------------------------------------------------------------------- data


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` atomically."""
    write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def sft_sets(cfg: TrainConfig) -> dict[str, dict[str, dict[str, list[dict]]]]:
    """``{style: {split: {difficulty: rows}}}``.

    A model-free teacher's sets are remade every time (seconds, deterministic), so they
    always follow the current code; other teachers' sets must exist.
    """
    from train.data import run
    from train.data_config import MODEL_FREE_TEACHERS

    root = Path(cfg.data_dir) / cfg.experiment
    data_cfg = _data_config(cfg, f"out_dir={cfg.data_dir}")
    if data_cfg.teacher in MODEL_FREE_TEACHERS:
        run(data_cfg)
    missing = [
        path
        for d in cfg.difficulties
        for s in STYLES
        for split in ("train", "val")
        if not (path := root / d / f"{s}_{split}.jsonl").is_file()
    ]
    if missing:
        raise ConfigError(
            f"data_dir={cfg.data_dir}: no SFT sets for {cfg.experiment} ({missing[0]}); "
            f"run `python -m train.data experiment={cfg.experiment}` first"
        )
    return {
        s: {
            split: {d: read_jsonl(root / d / f"{s}_{split}.jsonl") for d in cfg.difficulties}
            for split in ("train", "val")
        }
        for s in STYLES
    }


def eval_ids(cfg: TrainConfig) -> set[str]:
    """Ids of every evaluation problem of the experiment (the data config's eval splits)."""
    data_cfg = _data_config(cfg)
    return {p.id for d in cfg.difficulties for p in load_problems(data_cfg.datasets[d].eval)}


def _data_config(cfg: TrainConfig, *overrides: str):
    """The experiment's data config (``conf/data/<experiment>.yaml``), reading ``datasets_dir``."""
    from train.data_config import compose_data_config

    local = [f"datasets_dir={cfg.datasets_dir}"] if cfg.datasets_dir else []
    return compose_data_config([f"experiment={cfg.experiment}", *local, *overrides])


def check_no_leak(rows: list[dict], held_out: set[str], what: str) -> None:
    """Raise when a training row is an evaluation problem."""
    leaked = sorted({r["id"] for r in rows} & held_out)
    if leaked:
        raise DataLeakError(
            f"{what}: {len(leaked)} evaluation problems in training data, e.g. {leaked[0]}"
        )


# ----------------------------------------------------------------------------- steps


def cached(
    role: str, parent: Built, rows: list[dict], config: dict, out_dir: str
) -> tuple[Built, bool]:
    """The model ``out_dir`` trained from ``parent`` on ``rows`` with ``config`` (its cache
    key), and whether a build with that key is already there."""
    built = Built(str(out_dir), build_key(parent.key, data_hash(rows), config))
    current = is_current(Path(out_dir), built.key)
    if current:
        print(f"[build] {role}: up to date ({out_dir})", flush=True)
    return built, current


def train_model(
    role: str,
    parent: Built,
    rows: list[dict],
    val_rows: list[dict] | None,
    settings: SFTSettings,
    out_dir: str,
    cfg: TrainConfig,
    vocab_size: int | None = None,
    teacher: Built | None = None,
) -> Built:
    """SFT ``parent`` on ``rows`` into ``out_dir`` unless a build with the same key is there.

    ``vocab_size`` pads the model's embeddings to that many rows; ``teacher`` is the model
    whose distributions objective ``kl`` learns (see :func:`train.sft.sft`).
    """
    from train.merge import merge_lora
    from train.sft import sft

    # the thread count changes float reductions, so it is part of what a build is
    config = asdict(settings) | {"threads": cfg.threads}
    config |= {"vocab_size": vocab_size} if vocab_size else {}
    teacher = teacher if settings.objective == "kl" else None
    config |= {"teacher": teacher.key} if teacher else {}
    built, current = cached(role, parent, rows, config, out_dir)
    if current:
        return built
    key, out = built.key, Path(out_dir)
    print(f"[build] {role}: training on {len(rows)} examples from {parent.path}", flush=True)
    start = time.perf_counter()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    work = Path(cfg.work_dir) / f"{role}-{key}"
    trained = tmp if settings.lora is None else work / "adapter"
    result = sft(
        parent.path, rows, trained, settings, cfg, work, val_rows, vocab_size,
        teacher.path if teacher else None,
    )  # fmt: skip
    if settings.lora is not None:  # fold the adapter into the parent's weights
        merge_lora(parent.path, trained, tmp, cfg)
    method = "lora" if settings.lora else "full"
    manifest = Manifest(
        role=role,
        method=method,
        trained_from=parent.path,
        key=key,
        data_hash=data_hash(rows),
        config=config,
        steps=result.steps,
        final_loss=result.final_loss,
        eval_loss=result.eval_loss,
        train_seconds=round(result.train_seconds, 1),
        examples=len(rows),
        weights=weights_digest(tmp),
    )
    write_manifest(tmp, manifest)
    replace_dir(tmp, out)
    print(
        f"[build] {role}: {result.steps} steps, loss {result.final_loss:.3f}, "
        f"{time.perf_counter() - start:.0f} s -> {out}",
        flush=True,
    )
    return Built(str(out), key)


def scratch_bases(
    cfg: TrainConfig, exp: Experiment, sets: dict, held_out: set[str]
) -> tuple[Built, Built]:
    """Tokenizer, then base target and base draft trained from scratch (tiny world)."""
    from transformers import AutoTokenizer

    from train.pretrain import pretrain_rows
    from train.tiny import build_random_model
    from train.tokenizer import build_tokenizer

    sc = cfg.scratch
    work = Path(cfg.work_dir)
    chats: list = []
    pages: dict[str, list] = {style: [] for style in sc.pages}
    for d in cfg.difficulties:
        counts = {style: n.get(d, 0) for style, n in sc.pages.items()}
        problems = synth.generate(d, "train", max(sc.direct_chats, *counts.values()), seed=0)
        chats += problems[: sc.direct_chats]
        for style, n in counts.items():
            pages[style] += problems[:n]
    seen = {p.id: p for p in [*chats, *(p for ps in pages.values() for p in ps)]}.values()
    check_no_leak([{"id": p.id} for p in seen], held_out, "pretraining set")
    texts = [t for p in seen for t in (p.question, *solutions(p))]
    texts += [
        m["content"]
        for s in sets.values()
        for r in flat(s["train"])
        for m in (*r["prompt"], *r["completion"])
    ]
    texts += [*exp.prompts.values(), "system", "user", "assistant"]
    tok_key = digest({"texts": data_hash({"t": t} for t in texts), "vocab": sc.vocab_size})
    tok_dir = work / f"tokenizer-{tok_key}"
    if not tok_dir.is_dir():
        start = time.perf_counter()
        with atomic_dir(tok_dir) as tmp:
            build_tokenizer(texts, sc.vocab_size, tmp)
        print(f"[build] tokenizer: {time.perf_counter() - start:.0f} s", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    rows = pretrain_rows(chats, pages, exp.prompts, tokenizer, seed=0)
    bases = []
    for role, shape, settings, out in (
        ("target_base", sc.target, sc.target_sft, exp.targets["base"]),
        ("draft_base", sc.draft, sc.draft_sft, exp.drafts["base"]),
    ):
        init_key = digest({"tokenizer": tok_key, "shape": asdict(shape)})
        init_dir = work / f"{role}-init-{init_key}"
        if not init_dir.is_dir():
            with atomic_dir(init_dir) as tmp:
                build_random_model(shape, tokenizer, tmp, seed=0)
        bases.append(
            train_model(role, Built(str(init_dir), init_key), rows, None, settings, out, cfg)
        )
    return bases[0], bases[1]


def derived_draft(cfg: TrainConfig, target: Built) -> Built:
    """``cfg.draft_layers`` layers of ``target`` (its first ones, then its last
    ``cfg.draft_last_layers``), untrained as a draft (cached by key)."""
    from train.derive import truncated

    last = cfg.draft_last_layers
    key = digest({"derived_from": target.key, "layers": cfg.draft_layers}
                 | ({"last_layers": last} if last else {}))  # fmt: skip
    out = Path(cfg.work_dir) / f"draft-init-{key}"
    if not out.is_dir():
        with atomic_dir(out) as tmp:
            truncated(target.path, tmp, cfg.draft_layers, last)
    return Built(str(out), key)


def distilled(cfg: TrainConfig, target: Built, style: str, rows: list[dict]) -> list[dict]:
    """The target's own greedy answers to ``rows``' prompts.

    Cached per problem (by target, max_tokens and the row itself): one file per target
    grows as larger sets are asked for, and only the rows it lacks are distilled.
    """
    from train.distil import distil_rows

    key = build_key(target.key, "per-row", {"max_tokens": cfg.distil.max_tokens})
    path = Path(cfg.work_dir) / f"distil-{style}-{key}.jsonl"
    have = {row["row"]: row["answer"] for row in read_jsonl(path)} if path.is_file() else {}
    ids = [data_hash([r]) for r in rows]
    missing = list({i: r for i, r in zip(ids, rows, strict=True) if i not in have}.items())
    if missing:
        print(f"[build] distilling {len(missing)} answers of {target.path} "
              f"({len(rows) - len(missing)} cached)", flush=True)  # fmt: skip
        start = time.perf_counter()
        engine = asdict(cfg.engine)
        out, engine_start_s = distil_rows(
            target.path, [r for _, r in missing], engine, cfg.distil.max_tokens
        )
        seconds = time.perf_counter() - start
        print(f"[build] distilled in {seconds:.0f} s ({engine_start_s:.0f} s engine start)",
              flush=True)  # fmt: skip
        have |= {i: a for (i, _), a in zip(missing, out, strict=True)}
        write_jsonl(path, [{"row": i, "answer": a} for i, a in have.items()])
    return [have[i] for i in ids]


def eagle3_head(
    cfg: TrainConfig, role: str, target: Built, answers: list[dict], out_dir: str
) -> Built:
    """An EAGLE-3 head for ``target`` trained on its own ``answers`` into ``out_dir``, unless
    a build with the same key is there (:mod:`train.eagle3`)."""
    from train.eagle3 import train_head

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
            role=role, method=EAGLE3.method, trained_from=target.path, key=built.key,
            data_hash=data_hash(answers), config=config, steps=result.steps,
            final_loss=result.final_loss, eval_loss=None,
            train_seconds=round(result.train_seconds, 1), examples=len(answers),
            weights=weights_digest(tmp), eval_accuracy=[round(a, 4) for a in result.accuracy],
        ))  # fmt: skip
    accuracy = ", ".join(f"{a:.2f}" for a in result.accuracy)
    print(f"[build] {role}: {result.steps} steps, loss {result.final_loss:.3f}, held-back "
          f"accuracy per draft step {accuracy}, {time.perf_counter() - start:.0f} s -> {out_dir}",
          flush=True)  # fmt: skip
    return built


def flat(by_difficulty: dict[str, list[dict]], cap: int | None = None) -> list[dict]:
    """The rows of every difficulty, at most ``cap`` of each."""
    return [r for rows in by_difficulty.values() for r in rows[:cap]]


def run(cfg: TrainConfig) -> dict[str, str]:
    """Build every model of the experiment; returns ``{role: directory}``."""
    reproducible_torch(cfg)
    exp = Experiment.load(cfg.experiment)
    start = time.perf_counter()
    sets = sft_sets(cfg)
    print(f"[build] SFT sets: {time.perf_counter() - start:.0f} s", flush=True)
    held_out = eval_ids(cfg)
    for style, split_rows in sets.items():
        for split, rows in split_rows.items():
            check_no_leak(flat(rows), held_out, f"{style}_{split}")
    base_draft = None
    if cfg.scratch is not None:
        base_target, base_draft = scratch_bases(cfg, exp, sets, held_out)
    elif cfg.experiment in SOURCES:
        out = exp.targets["base"]
        base_target = Built(out, convert(SOURCES[cfg.experiment], out).key)
    else:
        base_target = _pretrained(exp.targets["base"])
    if base_draft is None and cfg.draft_layers is None:
        if "base" not in exp.drafts:
            raise ConfigError(
                f"experiment={cfg.experiment}: no models.drafts.base to train drafts from; "
                "set draft_layers to derive them from their targets"
            )
        base_draft = _pretrained(exp.drafts["base"])
    built = {"target_base": base_target.path}
    built |= {"draft_base": base_draft.path} if base_draft else {}
    for style in cfg.styles:
        train_rows, val_rows = flat(sets[style]["train"]), flat(sets[style]["val"])
        target = train_model(
            f"target_{style}",
            base_target,
            train_rows,
            val_rows,
            cfg.target,
            exp.targets[style],
            cfg,
        )
        answers = distilled(cfg, target, style, flat(sets[style]["train"], cfg.distil.max_problems))
        draft = train_model(
            f"draft_{style}",
            derived_draft(cfg, target) if cfg.draft_layers else base_draft,
            answers,
            None,
            cfg.draft,
            exp.drafts[style],
            cfg,
            vocab_size=config_vocab_size(target.path),
            teacher=target,
        )
        built |= {f"target_{style}": target.path, f"draft_{style}": draft.path}
        if cfg.eagle3 is not None:
            role = f"eagle3_{style}"
            cap = cfg.eagle3.answers or cfg.distil.max_problems  # the drafts' answers: cached
            rows = distilled(cfg, target, style, flat(sets[style]["train"], cap))
            out = f"{cfg.eagle3.out_dir}/{role}" if cfg.eagle3.out_dir else exp.drafts[role]
            built[role] = eagle3_head(cfg, role, target, rows, out).path
    return built


def reproducible_torch(cfg: TrainConfig) -> None:
    """A fixed thread count (every stage is seeded: with it, the same inputs give the same
    weights on CPU; docs/TINY_WORLD.md says why deterministic-only kernels are not asked for)."""
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)


def _pretrained(name: str) -> Built:
    """A base model given by the experiment: a built directory (its key) or a hub id."""
    manifest = read_manifest(name) if Path(name).is_dir() else None
    return Built(name, manifest.key if manifest else digest({"model": name}))


@command(DataLeakError, doc=__doc__)
def main(argv: list[str]) -> int:
    built = run(compose_train_config(argv))
    for role, path in built.items():
        manifest = read_manifest(path)  # None for a hub id
        print(f"{role}: {path}" + (f" (weights {manifest.weights})" if manifest else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
