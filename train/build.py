"""Build an experiment's models: base models, LoRA targets, then each trained speculator
family's models of every target (its ``trained_by`` trainer: distilled drafts, EAGLE-3 heads).

    python -m train.build                                  # experiment=tiny, into models/tiny/
    python -m train.build experiment=tiny target.max_steps=50 threads=1
    python -m train.build experiment=smollm2 datasets_dir=path/to/datasets   # CPU, about 45 min
    python -m train.build experiment=qwen2.5               # CUDA; after `python -m train.data experiment=qwen2.5`

Config ``conf/train/<experiment>.yaml``. A model whose cache key is unchanged is skipped, and
an interrupted training run resumes; the steps: docs/EXPERIMENTS.md.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.checks import command
from harness.config import ConfigError, compose_config
from harness.data import synth
from harness.data.datasets import load_problems
from harness.files import atomic_dir
from harness.manifest import data_hash, digest, read_manifest
from train.config import STYLES, TrainConfig, compose_train_config, trainers
from train.data import DataLeakError
from train.gguf import SOURCES, convert
from train.steps import Built, TrainedTarget, flat, read_jsonl, train_model
from train.teachers.synthetic import solutions


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


# ----------------------------------------------------------------------------- models


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
    builds = [trainer.build for trainer in trainers().values()]
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
        built[f"target_{style}"] = target.path
        trained = TrainedTarget(cfg, style, target, sets[style]["train"], exp.drafts, base_draft)
        for build in builds:
            built |= build(trained)
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
