"""Config schemas of the training-data pipeline; values live in ``conf/data/<experiment>.yaml``.

``conf/data/common.yaml`` holds what every experiment shares (teacher prompts, CoD bounds,
Gemini and vLLM teacher settings); each experiment file names its datasets per
difficulty, a ``train`` source and the ``eval`` split that must never leak into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from harness.config import (
    DIFFICULTIES,
    ConfigError,
    DatasetConfig,
    check,
    check_choice,
    compose_config,
)
from train.config import split_experiment
from train.formats import CodBounds
from train.teachers.base import TeacherPrompts
from train.teachers.vllm_teacher import VllmTeacherConfig

TEACHERS = ("synthetic", "gemini", "vllm", "gsm8k")
# deterministic and fast: train.build remakes their sets
MODEL_FREE_TEACHERS = ("synthetic", "gsm8k")
SOLVES = {
    "synthetic": "synth",
    "gsm8k": "gsm8k",
}  # the one dataset source a model-free teacher reads


@dataclass
class SourceConfig:
    """Where one difficulty's training problems come from, and its evaluation split."""

    train: DatasetConfig = MISSING
    eval: DatasetConfig = MISSING


@dataclass
class PromptsConfig:
    """Teacher prompt templates (``string.Template``; see ``TeacherPrompts``)."""

    cot_system: str = MISSING
    cot_user: str = MISSING
    cod_system: str = MISSING
    cod_user: str = MISSING


@dataclass
class GeminiConfig:
    """Gemini Batch API settings (``gemini.*`` in ``conf/data/common.yaml``)."""

    model: str = "gemini-2.5-flash"
    api_version: str = "v1beta"  # the Batch API lives in v1beta; the SDK default is v1
    base_url: str | None = None  # None = Google's endpoint
    upload_mime_type: str = "jsonl"
    generation_config: dict[str, Any] = field(default_factory=dict)  # GenerationConfig JSON
    max_requests_per_job: int = 5000
    max_bytes_per_job: int = 100_000_000  # the input file cap is 2 GB
    max_tokens_per_job: int = 5_000_000  # estimated input tokens enqueued by one job
    max_queued_tokens: int = 3_000_000  # estimated input tokens of a stage's running jobs
    max_rounds: int = 3  # submissions per key before it becomes an error reply
    create_attempts: int = 3  # batches.create tries; a lost answer is looked up by display name
    download_attempts: int = 5
    poll_initial_s: float = 15.0
    poll_max_s: float = 300.0
    wait_timeout_s: float = 180_000.0  # per job (jobs expire at 48 h); re-run resumes
    chars_per_token: float = 4.0  # token estimate for caps and cost
    expected_output_tokens: dict[str, int] = field(default_factory=lambda: {"cot": 400, "cod": 60})
    expected_thinking_tokens: int = 1000  # per request when thinking is on without a budget
    price_input_per_mtok: float = 0.30  # USD per 1M tokens at standard (interactive) price
    price_output_per_mtok: float = 2.50  # thinking tokens are billed as output
    batch_discount: float = 0.5  # batch jobs cost half


@dataclass
class DataConfig:
    """One ``python -m train.data`` run: every difficulty of one experiment."""

    experiment: str = MISSING
    teacher: str = "synthetic"  # synthetic | gemini | vllm | gsm8k
    datasets: dict[str, SourceConfig] = field(default_factory=dict)  # by difficulty
    limit: int | None = None  # training problems per difficulty sent to the teacher; None = all
    val_fraction: float = 0.05  # share of kept examples held out, chosen by problem-id hash
    out_dir: str = "data"
    datasets_dir: str | None = None  # folder of local dataset files (dataset configs name them)
    confirm: bool = False  # gemini: accept the cost estimate without asking
    min_kept_share: float = 0.1  # a teacher stage keeping less of what it was sent fails
    cod: CodBounds = field(default_factory=CodBounds)  # the study's 3-5 steps of <= 5 words
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    gemini: GeminiConfig = field(default_factory=GeminiConfig)
    vllm: VllmTeacherConfig = field(default_factory=VllmTeacherConfig)

    def teacher_prompts(self) -> TeacherPrompts:
        return TeacherPrompts(**vars(self.prompts))


def register_data_configs() -> None:
    """Register the data schema in Hydra's ConfigStore (idempotent)."""
    ConfigStore.instance().store(group="data", name="data_schema", node=DataConfig)


def compose_data_config(overrides: list[str]) -> DataConfig:
    """Compose, type-check and validate ``conf/data/<experiment>.yaml`` plus overrides.

    ``experiment=<name>`` picks the file (default ``tiny``); the rest are Hydra overrides.

    Raises:
        ConfigError: naming the first bad key and value.
    """
    experiment, rest = split_experiment(overrides, "data")
    register_data_configs()
    cfg: DictConfig = compose_config(rest, config_name=f"data/{experiment}")
    try:
        data: DataConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except ValueError as exc:  # CodBounds checks its values when built
        raise ConfigError(str(exc).splitlines()[0]) from None
    validate_data(data)
    return data


def validate_data(cfg: DataConfig) -> None:
    """Range and cross-field checks that types cannot express."""
    check_choice("teacher", cfg.teacher, TEACHERS)
    check(bool(cfg.datasets), "datasets", "{}", "name at least one difficulty")
    check(cfg.limit is None or cfg.limit > 0, "limit", cfg.limit, "must be > 0 or null")
    check(0 <= cfg.val_fraction < 1, "val_fraction", cfg.val_fraction, "must be in [0, 1)")
    check(0 <= cfg.min_kept_share <= 1, "min_kept_share", cfg.min_kept_share, "must be in [0, 1]")
    for difficulty, source in cfg.datasets.items():
        check(
            difficulty in DIFFICULTIES,
            "datasets",
            difficulty,
            f"keys must be {', '.join(DIFFICULTIES)}",
        )
        check(
            source.train.split != source.eval.split or source.train.path != source.eval.path,
            f"datasets.{difficulty}.train.split",
            source.train.split,
            "train and eval read the same split",
        )
        solves = SOLVES.get(cfg.teacher, source.train.source)
        check(
            source.train.source == solves,
            "teacher",
            cfg.teacher,
            f"the {cfg.teacher} teacher only solves {solves} datasets, not {source.train.name}",
        )
    check(
        cfg.teacher != "vllm" or bool(cfg.vllm.model),
        "vllm.model",
        cfg.vllm.model,
        "required for teacher=vllm",
    )
    try:
        cfg.teacher_prompts()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
