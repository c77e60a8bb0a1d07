"""Schemas of the model-building pipeline (the ``train`` section of an experiment).

Values live in ``conf/train/<experiment>.yaml`` (one primary config per experiment,
like ``conf/data/``); model directories and system prompts come from the experiment
itself (``conf/experiment/<name>.yaml``, ``conf/config.yaml``). A typo or a wrong type
fails when the config is composed; :func:`validate_train` checks the rest.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, make_dataclass
from types import ModuleType
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from harness import speculators
from harness.config import (
    CONF_DIR,
    DIFFICULTIES,
    ConfigError,
    EngineConfig,
    check,
    check_choice,
    compose_config,
)
from train.tiny import TinyModelConfig

DEVICES = ("cpu", "cuda")
OBJECTIVES = ("sft", "kl")
STYLES = ("cot", "cod")  # the trained targets' prompt styles
DEFAULT_EXPERIMENT = "tiny"


@dataclass
class LoraSettings:
    """PEFT LoRA adapter shape."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )


@dataclass
class SFTSettings:
    """One supervised fine-tuning run (TRL ``SFTTrainer``); ``lora`` null = full fine-tuning."""

    epochs: float = 1.0
    max_steps: int = -1  # > 0 overrides epochs
    learning_rate: float = 1e-4
    batch_size: int = 16
    grad_accum: int = 1
    warmup_ratio: float = 0.05
    scheduler: str = "cosine"
    weight_decay: float = 0.0
    max_length: int = 512
    completion_only_loss: bool = True  # False = the loss covers the prompt too
    logging_steps: int = 10
    save_steps: int = 200  # checkpoint interval, for resuming
    seed: int = 0
    # sft: cross-entropy of the completion; kl: forward KL to a teacher's next-token
    # distributions on the same tokens (drafts only: the teacher is the draft's target)
    objective: str = "sft"
    freeze_embeddings: bool = False  # keep the input embeddings (and a tied LM head) as they are
    lora: LoraSettings | None = None


@dataclass
class ScratchSettings:
    """Base models trained from scratch (the tiny world): see :mod:`train.pretrain`."""

    vocab_size: int = 1024
    direct_chats: int = 1000  # per difficulty: question -> "#### <answer>" chats
    # worked solutions per style (cot | cod) and difficulty: {"cod": {"easy": 1000}}
    pages: dict[str, dict[str, int]] = field(default_factory=dict)
    target: TinyModelConfig = field(default_factory=TinyModelConfig)
    draft: TinyModelConfig = field(default_factory=TinyModelConfig)
    target_sft: SFTSettings = field(default_factory=SFTSettings)
    draft_sft: SFTSettings = field(default_factory=SFTSettings)


@dataclass
class DistilSettings:
    """The trained target answers the training questions; its draft learns the answers."""

    max_tokens: int = 512
    max_problems: int | None = None  # per difficulty; None = every training question


@dataclass
class TrainConfig:
    """The whole pipeline: base models, LoRA targets, distilled drafts; each trained family's
    section is added by :func:`train_schema`."""

    experiment: str = MISSING
    engine: EngineConfig = MISSING  # vLLM engine of the distillation runs
    device: str = "cpu"  # cpu (fp32) | cuda
    # torch CPU threads for training; fixed, so that a build's weights do not depend on the
    # machine's core count (part of each model's key; null = torch's default: one per core)
    threads: int | None = 2
    bf16: bool = False
    gradient_checkpointing: bool = False
    difficulties: list[str] = field(default_factory=lambda: ["easy", "medium", "hard"])
    styles: list[str] = field(default_factory=lambda: list(STYLES))  # the targets to build
    data_dir: str = (
        "data"  # SFT sets: <data_dir>/<experiment>/<difficulty>/{cot,cod}_{train,val}.jsonl
    )
    work_dir: str = "models/.work"  # checkpoints, tokenizer, distillation sets
    scratch: ScratchSettings | None = None  # None = base models are models.{targets,drafts}.base
    # drafts derived from their target: its first draft_layers layers (train.derive), when no
    # smaller model shares its tokenizer; null = the draft starts from models.drafts.base
    draft_layers: int | None = None
    draft_last_layers: int = 0  # of the draft_layers, how many are the target's last layers
    datasets_dir: str | None = None  # local dataset files, for an offline teacher's sets
    target: SFTSettings = field(default_factory=SFTSettings)  # give it a lora section
    draft: SFTSettings = field(default_factory=SFTSettings)
    distil: DistilSettings = field(default_factory=DistilSettings)


def trainers() -> dict[str, ModuleType]:
    """Each trained family's trainer (its ``trained_by`` module) by method, in the registry's
    order. A trainer has ``build(TrainedTarget)``, and may have ``Settings`` (its section of
    the train config, named after its method; null = nothing built) with ``validate``."""
    families = speculators.FAMILIES.values()
    return {f.method: importlib.import_module(f.trained_by) for f in families if f.trained_by}


def train_schema() -> type:
    """``TrainConfig`` with each trainer's ``Settings`` as an optional section (null by default)."""
    sections = [
        (method, Optional[trainer.Settings], field(default=None))  # noqa: UP045 (OmegaConf)
        for method, trainer in trainers().items()
        if hasattr(trainer, "Settings")
    ]
    schema = make_dataclass("TrainConfig", sections, bases=(TrainConfig,))
    schema.__module__, schema.__doc__ = TrainConfig.__module__, TrainConfig.__doc__
    return schema


def register_train_configs() -> None:
    """Register the pipeline schema (:func:`train_schema`) in Hydra's ConfigStore."""
    ConfigStore.instance().store(group="train", name="train_schema", node=train_schema())


def experiments(stage: str) -> list[str]:
    """Experiments with a config for training stage ``stage`` (``conf/<stage>/<name>.yaml``).

    ``common.yaml`` holds what a stage's experiments share and is not one.
    """
    return sorted(p.stem for p in (CONF_DIR / stage).glob("*.yaml") if p.stem != "common")


def split_experiment(overrides: list[str], stage: str) -> tuple[str, list[str]]:
    """``(experiment, other overrides)``: ``experiment=<name>`` picks ``conf/<stage>/<name>.yaml``.

    The default is ``tiny``; the other overrides are Hydra's.

    Raises:
        ConfigError: when the experiment has no config for ``stage``.
    """
    experiment, rest = DEFAULT_EXPERIMENT, []
    for item in overrides:
        if item.startswith("experiment="):
            experiment = item.split("=", 1)[1]
        else:
            rest.append(item)
    known = experiments(stage)
    if experiment not in known:
        raise ConfigError(
            f"experiment={experiment}: no conf/{stage}/{experiment}.yaml; known: {', '.join(known)}"
        )
    return experiment, rest


def compose_train_config(overrides: list[str]) -> TrainConfig:
    """Compose, type-check and validate ``conf/train/<experiment>.yaml`` plus overrides.

    ``experiment=<name>`` picks the file (default ``tiny``); the rest are Hydra overrides.

    Raises:
        ConfigError: naming the bad key and value.
    """
    experiment, rest = split_experiment(overrides, "train")
    register_train_configs()
    try:
        cfg: TrainConfig = OmegaConf.to_object(
            compose_config(rest, config_name=f"train/{experiment}")
        )
    except ConfigError:
        raise
    except Exception as err:  # Hydra / OmegaConf errors span several lines: keep the first
        raise ConfigError(str(err).splitlines()[0]) from None
    validate_train(cfg)
    return cfg


def validate_train(cfg: TrainConfig) -> None:
    """Range and cross-field checks that types cannot express."""
    check_choice("device", cfg.device, DEVICES)
    check(cfg.target.lora is not None, "target.lora", None, "targets are trained with LoRA")
    check(cfg.draft.lora is None, "draft.lora", cfg.draft.lora, "drafts are fully fine-tuned")
    check_choice("draft.objective", cfg.draft.objective, OBJECTIVES)
    check(cfg.target.objective == "sft", "target.objective", cfg.target.objective,
          "targets learn from the teacher's text (sft); kl is for drafts")  # fmt: skip
    for s in cfg.styles:
        check_choice("styles", s, STYLES)
    for d in cfg.difficulties:
        check_choice("difficulties", d, DIFFICULTIES)
    check(cfg.draft_layers is None or cfg.draft_layers >= 1, "draft_layers", cfg.draft_layers,
          "must be >= 1 or null")  # fmt: skip
    check(0 <= cfg.draft_last_layers <= (cfg.draft_layers or 0), "draft_last_layers",
          cfg.draft_last_layers, "must be between 0 and draft_layers")  # fmt: skip
    for method, trainer in trainers().items():
        section = getattr(cfg, method, None)
        if section is not None:
            trainer.validate(section)
    check(cfg.threads is None or cfg.threads >= 1, "threads", cfg.threads, "must be >= 1 or null")
    for style, counts in (cfg.scratch.pages if cfg.scratch else {}).items():
        check_choice("scratch.pages", style, STYLES)
        for d in counts:
            check_choice(f"scratch.pages.{style}", d, DIFFICULTIES)
