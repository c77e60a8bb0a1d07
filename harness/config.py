"""Config schemas (Hydra structured configs): types here, values in ``conf/``.

Every group has one dataclass registered in Hydra's ConfigStore, so a typo or a wrong
type in an override fails when the config is composed. Range checks that types cannot
express live in :func:`validate` and raise :class:`ConfigError` with one readable line.
"""

from __future__ import annotations

import importlib.util
import math
import urllib.parse
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, AnyNode, DictConfig, ListConfig, OmegaConf

from harness import backends, schedule, speculators
from harness.errors import ConfigError, DatasetError  # noqa: F401 (the schemas' errors)

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

DIFFICULTIES = ("easy", "medium", "hard")
PROMPT_STYLES = ("direct", "cot", "cod")
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")  # vLLM's SpeculativeConfig.draft_sample_method
# interleaved: a plain engine of the job's target runs the same problems alongside
# (``harness.measure.pairing``); sequential: the job's engine alone
PAIRINGS = ("interleaved", "sequential")
# arrival gaps ~ Gamma(burstiness): beyond this the gaps are constant to float precision and
# numpy's gamma draws overflow to NaN
MAX_BURSTINESS = 1e6


@dataclass
class DatasetConfig:
    """Where problems come from. ``source`` picks the loader in ``harness.data.datasets``."""

    name: str = MISSING
    source: str = MISSING  # gsm8k | math | synth
    difficulty: str = MISSING  # easy | medium | hard
    split: str = "test"
    path: str | None = None  # local JSONL in the original format; else the hub
    hf_id: str | None = None
    hf_config: str | None = None
    math_type: str | None = None  # MATH "type" field to keep, e.g. "Algebra"
    levels: list[int] = field(default_factory=list)  # MATH levels to keep
    size: int = 200  # synth: number of problems generated for the split
    seed: int = 0  # synth: generator seed (fixed, independent of the run seed)
    allow_malformed: bool = False  # skip (and count) malformed rows instead of refusing


@dataclass
class VariantConfig:
    """A target (key into ``models.targets``), an optional draft and a prompt style."""

    name: str = MISSING
    target: str = MISSING  # base | cot | cod
    draft: str | None = None  # a key of models.drafts (a draft model or a head), or None
    prompt_style: str = MISSING  # direct | cot | cod
    method: str = "draft_model"  # the speculator family (harness.speculators.METHODS)


@dataclass
class ModelsConfig:
    """Model directories or hub ids by role; set by the experiment."""

    targets: dict[str, str] = field(default_factory=dict)
    drafts: dict[str, str] = field(default_factory=dict)


@dataclass
class EngineConfig:
    """vLLM engine settings for one kind of hardware."""

    device: str = MISSING  # cpu | cuda
    dtype: str = "auto"
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    draft_tensor_parallel_size: int | None = None
    enforce_eager: bool = False
    cpu_kvcache_space_gib: int | None = None  # VLLM_CPU_KVCACHE_SPACE on CPU
    # VLLM_CPU_OMP_THREADS_BIND on CPU: the cores of the model's threads ("0-1", "1", ...);
    # None leaves vLLM's "auto" (docs/PAIRING.md measures placements)
    cpu_threads_bind: str | None = None
    # VLLM_ENABLE_V1_MULTIPROCESSING of an offline engine: true (vLLM's default) gives it an
    # engine core and a worker process of its own; false runs them in the harness's process
    # (seconds to start, no busy-polling processes). A family that needs processes of its
    # own (Speculator.needs_multiprocessing) and a server always get them
    multiprocessing: bool = True
    max_num_seqs: int = 256
    enable_prefix_caching: bool = False
    gpu_memory_gb: float | None = None  # one GPU's memory, for the memory pre-flight


@dataclass
class SharedSpecConfig:
    """Speculative decoding: ``k`` draft tokens per verify step; 0 = plain decoding. The keys
    every family reads; a family's own keys are its ``Options`` (:data:`SpecConfig`)."""

    k: int = 0
    draft_sample_method: str = "greedy"  # how the draft proposes: greedy | probabilistic
    # K by batch size (harness.schedule): [[first, last, K], ...]; None = k always. Any, not
    # list[list[int]]: a bad entry gets schedule.check's one line, not Hydra's traceback
    k_schedule: Any = None
    # what-if: drafts accepted at random so the mean acceptance length is this (vLLM's
    # synthetic rejection sampling, real step costs); None = the speculator's own acceptance
    synthetic_acceptance_length: float | None = None


# the ``spec`` group: the shared keys and every family's own (``Speculator.Options``)
SpecConfig = speculators.spec_schema(SharedSpecConfig, speculators.FAMILIES.values())


@dataclass
class ServerConfig:
    """``backend=server``: the vLLM server the jobs stream from."""

    url: str | None = None  # a running server (http://host:port); None = start one per engine spec
    start_timeout_s: float = 600.0  # how long a started server may take to become healthy


@dataclass
class SloConfig:
    """Service-level objectives: a request meets the SLO when it meets every bound set."""

    ttft_ms: float | None = None  # time to first token
    tpot_ms: float | None = None  # time per output token after the first
    e2e_ms: float | None = None  # end-to-end latency


TRACKERS = ("none", "mlflow")


@dataclass
class TrackingConfig:
    """An experiment tracker each finished run is logged to (``harness.tracking``)."""

    name: str = "none"  # one of TRACKERS
    uri: str | None = None  # None: sqlite under results_dir


@dataclass
class Config:
    """One job: (variant, dataset, spec.k, concurrency, seed, temperature)."""

    experiment: str = MISSING
    models: ModelsConfig = field(default_factory=ModelsConfig)
    dataset: DatasetConfig = MISSING
    variant: VariantConfig = MISSING
    engine: EngineConfig = MISSING
    spec: SpecConfig = field(default_factory=SpecConfig)
    prompts: dict[str, str] = field(default_factory=dict)  # system prompt per style
    limit: int | None = None  # number of problems; None = all
    seed: int = 0
    temperature: float = 0.0
    max_tokens: int = 512
    concurrency: int = 1
    backend: str = "offline"  # offline | server (harness.backends.server)
    # open-loop arrivals (requests/s, inf = all at once; backend=server), with at most
    # ``concurrency`` in flight; None = closed loop (a new request as one finishes)
    request_rate: float | None = None
    burstiness: float = 1.0  # arrival gaps ~ Gamma(burstiness): 1 = Poisson, as vllm bench serve
    server: ServerConfig = field(default_factory=ServerConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    tracking: TrackingConfig = MISSING
    warmup: int = 1  # unrecorded warm-up rounds per job, min(concurrency, problems) prompts each
    repeats: int = 1  # runs of each job, seeds seed, seed+1, ... (same problems)
    repeat: int = 0  # which of those runs this is (set by the harness)
    pairing: str = "interleaved"  # interleaved | sequential (harness.measure.pairing)
    instances: int = 1  # fresh engine instances (pairs when interleaved) per job
    # requests in each side's turn when interleaved (open-loop: the same arrival draws on both
    # sides of a window); None = concurrency (docs/PAIRING.md)
    pair_window: int | None = None
    sentinel_requests: int = 5  # the drift sentinel's reference requests at each end of a job
    results_dir: str = "results"
    datasets_dir: str | None = None  # folder of local dataset files (dataset configs name them)
    sweep: str = "${experiment}"
    force: bool = False
    calibrate: bool = True  # time each engine on fixed prompts once (harness.sweep.calibrate)
    plan: bool = False  # print the sweep's engines, jobs and memory; start nothing


def _file_in(directory: str | None, name: str) -> str | None:
    """``directory/name``, or None when no directory is set (the ``file_in`` resolver)."""
    return None if directory is None else str(Path(directory).expanduser() / name)


# conf/dataset/*.yaml: `path: ${file_in:${oc.select:datasets_dir,null},gsm8k_${.split}.jsonl}`
OmegaConf.register_new_resolver("file_in", _file_in, replace=True)


def register_configs() -> None:
    """Register every schema in Hydra's ConfigStore (idempotent)."""
    # conf/hydra/launcher/submitit_*.yaml share their names with the submitit plugin's
    # schemas on purpose (Hydra validates them against those); silence its notice on that.
    warnings.filterwarnings(
        "ignore", message="(?s).*validated against ConfigStore schema with the same name"
    )
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="dataset", name="dataset_schema", node=DatasetConfig)
    cs.store(group="variant", name="variant_schema", node=VariantConfig)
    cs.store(group="engine", name="engine_schema", node=EngineConfig)
    cs.store(group="tracking", name="tracking_schema", node=TrackingConfig)


def compose_config(
    overrides: list[str] | None = None,
    config_name: str = "config",
    return_hydra_config: bool = False,
) -> DictConfig:
    """Compose the project config outside a Hydra app (CLIs, tests)."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(
            config_name=config_name,
            overrides=list(overrides or []),
            return_hydra_config=return_hydra_config,
        )


def group_options(group: str) -> list[str]:
    """The options of a config group (its YAML files), schemas excluded."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_group_overrides(overrides: list[str]) -> None:
    """Every ``group=option`` override names an existing option (Hydra's own error on an
    unknown option spans a screen; this is the one-line version, run before composing).

    Sweep lists (``dataset=a,b``) are checked item by item; sweep functions are left to Hydra.
    """
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if not (CONF_DIR / key).is_dir() or "(" in value:
            continue
        options = group_options(key)
        for option in value.split(","):
            check(option in options, key, option, f"unknown; choose from {', '.join(options)}")


_EXPECTED = {"IntegerNode": "an integer", "FloatNode": "a number", "BooleanNode": "true or false"}


def _expected(node: Any) -> str:
    what = _EXPECTED.get(type(node).__name__, "a string")
    return f"{what} or null" if node._is_optional() else what


# keys the harness sets itself, with what to use instead
SET_BY_HARNESS = {"repeat": "set by the harness for each of repeats=N runs; use repeats=N"}


# Hydra's keys that place its files (.hydra/ configs, job logs); conf/hydra/output puts
# them under results_dir/<sweep>/.hydra
HYDRA_PATHS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir", "hydra.output_subdir")


def check_hydra_paths(overrides: list[str]) -> None:
    """No override moves Hydra's files out of ``results_dir/<sweep>``: its run and sweep
    folders and any logging handler's file."""
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        log_file = key.startswith(("hydra.job_logging.", "hydra.hydra_logging.")) and key.endswith(
            ".filename"
        )
        check(
            key not in HYDRA_PATHS and not log_file,
            key,
            value,
            "Hydra's files go under results_dir/<sweep>/.hydra; set results_dir and sweep instead",
        )


def check_overrides(overrides: list[str]) -> None:
    """Every ``key=value`` override names a key of the schema and a value of its type (each
    value of a sweep list), in one line (Hydra's own errors span a screen and exit 1).

    ``+key`` adds entries only to free-form maps (``models.targets``, ``prompts``): a key
    the schema does not know would run silently and change the config hash. Group choices
    are :func:`check_group_overrides`'; ``hydra.*``, ``~key`` and interval sweeps are Hydra's.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException
    from omegaconf.errors import ValidationError

    check_hydra_paths(overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(
            [o for o in overrides if "=" in o or o.startswith("~")]
        )
    except OverrideParseException as exc:
        raise ConfigError(_unparsable(overrides) or str(exc).splitlines()[0]) from None
    is_group = [(CONF_DIR / o.key_or_group).is_dir() for o in parsed]
    groups = [
        f"{o.key_or_group}={next(iter(o.sweep_iterator())) if o.is_discrete_sweep() else o.value()}"
        for o, group in zip(parsed, is_group, strict=True)
        if group and not o.is_hydra_override() and not o.is_delete()
    ]
    cfg = compose_config(groups)
    hydra_groups = [str(o.input_line) for o, group in zip(parsed, is_group, strict=True)
                    if group and o.is_hydra_override() and not o.is_sweep_override()]  # fmt: skip
    for o, group in zip(parsed, is_group, strict=True):
        if o.is_delete() and not group and not o.is_hydra_override():
            raise ConfigError(f"{o.input_line}: keys cannot be deleted; set a value instead")
        if o.is_hydra_override() and not group and not o.is_sweep_override():
            try:
                compose_config([*groups, *hydra_groups, o.input_line], return_hydra_config=True)
            except Exception as exc:  # Hydra's composition error, caused by OmegaConf's
                cause = str(exc.__cause__ or exc).strip().splitlines() or [type(exc).__name__]
                raise ConfigError(f"{o.input_line}: {cause[0]}") from None
        if group or o.is_hydra_override() or o.is_delete() or o.is_interval_sweep():
            continue
        key, shown = o.key_or_group, str(o.input_line).partition("=")[2]
        check(key not in SET_BY_HARNESS, key, shown, SET_BY_HARNESS.get(key, ""))
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        free_form = isinstance(parent, DictConfig) and OmegaConf.get_type(parent) is dict
        if not isinstance(parent, DictConfig) or (leaf not in parent and not free_form):
            keys = ", ".join(parent) if isinstance(parent, DictConfig) else "no keys"
            raise ConfigError(
                f"{key}={shown}: unknown key ({parent_key or 'the config'} has {keys})"
            )
        if leaf not in parent:
            check(
                o.is_add() or o.is_force_add(), key, shown, f"no such entry; add one with +{key}="
            )
            continue
        check(not o.is_add(), f"+{key}", shown, f"{key} exists; set it without +")
        node = parent._get_node(leaf)
        values = list(o.sweep_iterator()) if o.is_discrete_sweep() else [o.value()]
        for value in values:
            if isinstance(node, DictConfig):
                check(isinstance(value, dict), key, value, f"expected keys ({key}.<key>=<value>)")
                continue
            if isinstance(node, ListConfig) or OmegaConf.get_type(parent, leaf) is list:
                check(value is None or isinstance(value, list), key, value, "expected a list")
                continue
            if isinstance(node, AnyNode) or (isinstance(value, str) and "${" in value):
                continue  # an Any-typed key's value is validate()'s to check
            try:
                node.validate_and_convert(value)
            except ValidationError:
                raise ConfigError(f"{key}={value}: expected {_expected(node)}") from None


def check_command_line(args: list[str]) -> DictConfig | None:
    """The checks ``python -m harness`` runs before Hydra: group choices, then keys and
    types, then (a single run) the composed config's :func:`validate`.

    Returns:
        The single run's config; None for a multirun (its sweeper checks every job).
    """
    check_group_overrides(args)
    check_overrides(args)
    if {"-m", "--multirun"} & set(args):
        return None
    cfg = compose_config([a for a in args if not a.startswith(("-", "hydra"))])
    validate(cfg)
    return cfg


def _unparsable(overrides: list[str]) -> str | None:
    """The first ``key=value`` Hydra's grammar cannot read, and how to quote its value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in (o for o in overrides if "=" in o):
        try:
            parser.parse_override(override)
        except HydraException:
            key, _, value = override.partition("=")
            quote = "'" if '"' in value else '"'
            shell = '"' if quote == "'" else "'"
            return (
                f"{override}: Hydra cannot read this value unquoted; for text, quote it: "
                f"{shell}{key}={quote}{value}{quote}{shell}"
            )
    return None


def check(ok: bool, key: str, value: Any, why: str) -> None:
    """Raise ``ConfigError("<key>=<value>: <why>")`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{key}={value}: {why}")


def check_slo(slo: Any) -> None:
    """Every bound of an ``slo`` mapping is > 0 or null."""
    for name, bound in slo.items():
        check(bound is None or bound > 0, f"slo.{name}", bound, "must be > 0 or null")


def check_server_url(url: str | None) -> None:
    """``server.url`` is null or ``http(s)://host[:port][/path]`` with a port in 1-65535."""
    if url is None:
        return
    example = "(e.g. http://127.0.0.1:8000)"
    parts = urllib.parse.urlsplit(url)
    check(
        parts.scheme in ("http", "https") and url.startswith(f"{parts.scheme}://"),
        "server.url",
        url,
        f"must start with http:// or https:// {example}",
    )
    check(bool(parts.hostname), "server.url", url, f"names no host {example}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    check(port is None or 0 < port < 65536, "server.url", url, "its port must be in 1-65535")


def check_choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    """:func:`check` that ``value`` is one of ``choices``."""
    check(value in choices, key, value, f"must be one of {', '.join(choices)}")


def check_parallelism(engine: Any, gpus: int | None = None) -> None:
    """Tensor parallelism vLLM accepts, and that fits ``gpus`` per node when known.

    The draft runs with TP 1 or the target's TP (vLLM's rule for draft models).
    """
    tp, draft_tp = engine.tensor_parallel_size, engine.draft_tensor_parallel_size
    check(tp >= 1, "engine.tensor_parallel_size", tp, "must be >= 1")
    check(
        draft_tp in (None, 1, tp),
        "engine.draft_tensor_parallel_size",
        draft_tp,
        f"must be 1 or the target's tensor_parallel_size ({tp})",
    )
    check(
        engine.device == "cuda" or tp == 1,
        "engine.tensor_parallel_size",
        tp,
        f"tensor parallelism needs engine=cuda (engine.device is {engine.device})",
    )
    check(
        gpus is None or tp <= gpus,
        "engine.tensor_parallel_size",
        tp,
        f"needs {tp} GPUs but a node offers {gpus}",
    )


def check_synthetic(spec: Any) -> None:
    """A synthetic acceptance length needs drafts (K > 0), one K and a value in [1, K + 1]."""
    length = spec.synthetic_acceptance_length
    if length is None:
        return
    key = "spec.synthetic_acceptance_length"
    check(spec.k > 0, key, length, "needs spec.k > 0 (drafts to accept)")
    check(spec.k_schedule is None, key, length, "needs one K (spec.k_schedule=null)")
    check(
        1 <= length <= spec.k + 1,
        key,
        length,
        f"must be between 1 and spec.k + 1 = {spec.k + 1} (tokens per verify step)",
    )


def check_tracker_installed(name: str) -> None:
    """``tracking=mlflow`` needs MLflow's client."""
    from harness import tracking

    check(
        name != "mlflow" or tracking.installed(),
        "tracking",
        name,
        f"the {tracking.PACKAGE} package is not installed; run `make install-tracking`",
    )


def validate(cfg: Any) -> None:
    """Check ranges and cross-field rules of a composed job config.

    Raises:
        ConfigError: naming the first bad key and value.
    """
    check(cfg.spec.k >= 0, "spec.k", cfg.spec.k, "must be >= 0 (0 = no speculation)")
    check(
        bool(cfg.sweep) and Path(cfg.sweep).name == cfg.sweep and cfg.sweep not in (".", ".."),
        "sweep",
        cfg.sweep,
        "must be a folder name inside results_dir (no path)",
    )
    check(
        bool(cfg.results_dir),
        "results_dir",
        "",
        "must name a folder (runs go to results_dir/sweep)",
    )
    speculators.of(cfg.variant).validate(cfg)
    check(
        cfg.spec.k == 0 or speculators.can_speculate(cfg.variant),
        "spec.k",
        cfg.spec.k,
        f"variant {cfg.variant.name} has no draft model and no model-free method; "
        "use spec.k=0 or a *_sd / *_ngram / *_eagle3 variant",
    )
    if cfg.spec.k_schedule is not None:
        ranges = cfg.spec.k_schedule
        schedule.check(
            cfg.spec.k, OmegaConf.to_object(ranges) if OmegaConf.is_config(ranges) else ranges
        )
    check_synthetic(cfg.spec)
    check(cfg.limit is None or cfg.limit > 0, "limit", cfg.limit, "must be > 0 or null")
    check(cfg.concurrency >= 1, "concurrency", cfg.concurrency, "must be >= 1")
    check(cfg.warmup >= 0, "warmup", cfg.warmup, "must be >= 0 (0 = no warm-up)")
    check(cfg.repeats >= 1, "repeats", cfg.repeats, "must be >= 1")
    check_choice("pairing", cfg.pairing, PAIRINGS)
    check_choice("tracking.name", cfg.tracking.name, TRACKERS)
    check_tracker_installed(cfg.tracking.name)
    check(cfg.instances >= 1, "instances", cfg.instances, "must be >= 1")
    window = cfg.pair_window
    check(window is None or window >= 1, "pair_window", window, "must be >= 1 or null")
    check(cfg.sentinel_requests >= 1, "sentinel_requests", cfg.sentinel_requests, "must be >= 1")
    check(
        cfg.limit is None or cfg.instances <= cfg.limit,
        "instances",
        cfg.instances,
        f"must be at most limit={cfg.limit}: each instance answers its share of the problems",
    )
    backend = backends.of(cfg)  # an unknown one is named with the known ones
    rate = cfg.request_rate
    check(
        rate is None or (rate > 0 and not math.isnan(rate)),
        "request_rate",
        rate,
        "must be > 0 (requests/s), inf or null",
    )
    backend.validate(cfg)
    check(
        math.isfinite(cfg.burstiness) and 0 < cfg.burstiness <= MAX_BURSTINESS,
        "burstiness",
        cfg.burstiness,
        f"must be a finite number in (0, {MAX_BURSTINESS:g}] (1 = Poisson arrivals)",
    )
    check_slo(cfg.slo)
    check_server_url(cfg.server.url)
    check_choice("spec.draft_sample_method", cfg.spec.draft_sample_method, DRAFT_SAMPLE_METHODS)
    check(
        cfg.concurrency <= cfg.engine.max_num_seqs,
        "concurrency",
        cfg.concurrency,
        f"must be <= engine.max_num_seqs={cfg.engine.max_num_seqs} (requests the engine runs at once)",
    )
    check(cfg.max_tokens >= 1, "max_tokens", cfg.max_tokens, "must be >= 1")
    check(
        math.isfinite(cfg.temperature) and cfg.temperature >= 0,
        "temperature",
        cfg.temperature,
        "must be a finite number >= 0",
    )
    check_choice("dataset.difficulty", cfg.dataset.difficulty, DIFFICULTIES)
    check_parallelism(cfg.engine)
    check_choice("variant.prompt_style", cfg.variant.prompt_style, PROMPT_STYLES)
    check(
        cfg.variant.prompt_style in cfg.prompts,
        "variant.prompt_style",
        cfg.variant.prompt_style,
        f"no system prompt under prompts.{cfg.variant.prompt_style}",
    )
    check(
        cfg.variant.target in cfg.models.targets,
        "variant.target",
        cfg.variant.target,
        f"experiment {cfg.experiment} defines targets {sorted(cfg.models.targets)}",
    )
    check(
        cfg.variant.draft is None or cfg.variant.draft in cfg.models.drafts,
        "variant.draft",
        cfg.variant.draft,
        f"experiment {cfg.experiment} defines drafts {sorted(cfg.models.drafts)}",
    )


def cuda_visible() -> bool:
    """Whether torch sees a GPU; a torch built without CUDA or ROCm (no ``libtorch_cuda`` or
    ``libtorch_hip`` beside it) answers no without being imported (seconds)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False
    lib = Path(spec.origin).parent / "lib"
    if not any(lib.glob("libtorch_cuda*")) and not any(lib.glob("libtorch_hip*")):
        return False
    import torch

    return torch.cuda.is_available()


def with_engine_override(argv: list[str], cuda_visible: bool) -> list[str]:
    """``argv`` plus ``engine=cuda`` when a GPU is visible and no engine group was chosen."""
    chosen = any(arg.split("=", 1)[0].lstrip("+") == "engine" for arg in argv[1:])
    return argv if chosen or not cuda_visible else [*argv, "engine=cuda"]
