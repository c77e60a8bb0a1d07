"""Memory pre-flight: does a job's engine fit its GPU? Estimated from each model's config.json.

Per GPU (rank 0): target weights / TP + draft weights / draft TP + the KV cache of both
for concurrency x max_model_len tokens + :data:`OVERHEAD_GB`, against
``gpu_memory_utilization`` x the GPU's memory (the visible GPU's, else
``engine.gpu_memory_gb``). CPU engines are not checked. What it counts: docs/USAGE.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from harness import speculators
from harness.checks import model_config
from harness.errors import ConfigError

GB = 1e9
OVERHEAD_GB = 2.0
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# config.json fields of hub models the study names, as published on their model cards,
# so a plan shows estimates before anything is downloaded; a local or cached file wins.
PUBLISHED: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-14B-Instruct": {
        "model_type": "qwen2",
        "num_hidden_layers": 48,
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2.5-0.5B-Instruct": {
        "model_type": "qwen2",
        "num_hidden_layers": 24,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    },
}


@dataclass(frozen=True)
class Architecture:
    """The shapes of a decoder-only transformer that decide its memory."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Architecture:
        """From a Hugging Face config.json (Qwen2 / Llama field names)."""
        heads = config["num_attention_heads"]
        return cls(
            layers=config["num_hidden_layers"],
            hidden=config["hidden_size"],
            intermediate=config["intermediate_size"],
            heads=heads,
            kv_heads=config.get("num_key_value_heads", heads),
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            vocab=config["vocab_size"],
            tied=config.get("tie_word_embeddings", False),
            qkv_bias=config.get("attention_bias", config.get("model_type") == "qwen2"),
        )

    def params(self) -> int:
        """Parameters: embeddings (+ LM head unless tied), attention with GQA, gated MLP, norms."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = self.hidden * (q + 2 * kv) + q * self.hidden
        if self.qkv_bias:
            attention += q + 2 * kv
        mlp = 3 * self.hidden * self.intermediate  # gate, up, down
        per_layer = attention + mlp + 2 * self.hidden  # two RMSNorms
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * per_layer + embeddings + self.hidden  # + final norm

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV cache per token: keys and values of every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class ModelMemory:
    """One model as the engine holds it: architecture, bytes per value, where the config came from."""

    name: str
    arch: Architecture
    dtype_bytes: int
    source: str  # "config.json" | "published config" | "as <base model>"

    def weights_gb(self) -> float:
        return self.arch.params() * self.dtype_bytes / GB

    def kv_gb(self, tokens: int) -> float:
        return self.arch.kv_bytes_per_token(self.dtype_bytes) * tokens / GB


def load_model(name: str, dtype: str, base: str | None = None) -> ModelMemory | None:
    """A model's memory figures from its config.json (local, cached, or published), else from
    ``base`` (a trained model not built yet keeps its base's architecture); None when unknown."""
    for candidate, source in ((name, None), (base, f"as {base}")):
        if candidate is None:
            continue
        config, found = model_config(candidate), "config.json"
        if config is None and candidate in PUBLISHED:
            config, found = PUBLISHED[candidate], "published config"
        if config is not None and "transformer_layer_config" in config:  # a speculators head
            head = config["transformer_layer_config"]
            config = head | {"vocab_size": config.get("draft_vocab_size") or head["vocab_size"]}
            found = "config.json (head layers)"
        if config is not None:
            dtype = config.get("torch_dtype", "bfloat16") if dtype == "auto" else dtype
            return ModelMemory(
                name, Architecture.from_config(config), DTYPE_BYTES[dtype], source or found
            )
    return None


@dataclass(frozen=True)
class Estimate:
    """Memory one GPU needs for an engine at ``tokens`` = concurrency x max_model_len."""

    weights_gb: float
    kv_gb: float
    tokens: int
    limit_gb: float | None  # usable memory: gpu_memory_utilization x the GPU's
    limit_source: str
    basis: str  # where each model's architecture came from

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.kv_gb + OVERHEAD_GB

    def breakdown(self) -> str:
        """``weights + KV cache + overhead`` in GB."""
        return (
            f"weights {self.weights_gb:,.1f} + KV cache {self.kv_gb:,.1f} ({self.tokens:,} "
            f"tokens) + overhead {OVERHEAD_GB:.1f} GB"
        )

    def line(self) -> str:
        """The breakdown, the total and the usable memory, one line."""
        limit = f"{self.limit_gb:.1f} GB usable" if self.limit_gb is not None else "no limit"
        return (
            f"{self.breakdown()} = {self.total_gb:,.1f} GB per GPU, {limit} ({self.limit_source})"
        )


def gpu_limit(engine: Any, visible_gb: float | None) -> tuple[float | None, str]:
    """Usable GB per GPU and what it is based on; None when nothing names a GPU size."""
    util = engine["gpu_memory_utilization"]
    if visible_gb is not None:
        return util * visible_gb, f"{util:g} x the visible GPU's {visible_gb:.0f} GB"
    size = engine.get("gpu_memory_gb")
    if size is None:
        return None, "no GPU size: set engine.gpu_memory_gb"
    return util * size, f"{util:g} x engine.gpu_memory_gb={size:g}"


def estimate(
    engine: dict[str, Any],
    target: ModelMemory,
    draft: ModelMemory | None,
    concurrency: int,
    visible_gb: float | None = None,
) -> Estimate:
    """The per-GPU estimate of an engine (``engine``: the engine config as a dict)."""
    tp = engine["tensor_parallel_size"]
    tokens = concurrency * engine["max_model_len"]
    weights, kv = target.weights_gb() / tp, target.kv_gb(tokens) / tp
    if draft is not None:
        draft_tp = engine.get("draft_tensor_parallel_size") or tp
        weights += draft.weights_gb() / draft_tp
        kv += draft.kv_gb(tokens) / draft_tp
    limit, source = gpu_limit(engine, visible_gb)
    models = [m for m in (target, draft) if m is not None]
    basis = ", ".join(f"{m.name}: {m.arch.params() / 1e9:.2f}B params ({m.source})" for m in models)
    return Estimate(weights, kv, tokens, limit, source, basis)


def check_fits(est: Estimate, engine: dict[str, Any], concurrency: int) -> None:
    """Raise a one-line ConfigError when the estimate exceeds the usable GPU memory."""
    if est.limit_gb is not None and est.total_gb > est.limit_gb:
        raise ConfigError(
            f"engine.max_model_len={engine['max_model_len']}, concurrency={concurrency}: "
            f"needs ~{est.total_gb:,.1f} GB per GPU ({est.breakdown()}), more than the "
            f"{est.limit_gb:.1f} GB usable ({est.limit_source}); lower concurrency or "
            "max_model_len, or use more GPUs (engine=cuda_tp2)"
        )


def visible_gpu_gb() -> float | None:
    """Memory of the first visible CUDA GPU in GB; None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / GB


def fit(
    spec: Any, concurrency: int, bases: tuple[str | None, str | None] = (None, None)
) -> Estimate | str:
    """The estimate of an engine spec at ``concurrency`` (checked against its GPU), or a
    note saying why it was skipped. ``bases``: the target's and draft's base models, used
    for models not built yet.

    Raises:
        ConfigError: the job cannot fit.
    """
    engine = dict(spec.settings)
    if engine["device"] != "cuda":
        return f"memory check skipped: engine.device={engine['device']}"
    target = load_model(spec.target, engine["dtype"], bases[0])
    draft = load_model(spec.draft, engine["dtype"], bases[1]) if spec.draft else None
    layers = speculators.get(spec.method).unbuilt_layers if spec.method else None
    if draft is None and spec.draft and layers and target is not None:
        # a checkpoint not on disk sized as layers of its target's shape, the target's vocab
        draft = ModelMemory(spec.draft, replace(target.arch, layers=layers), target.dtype_bytes,
                            f"as {layers} layer{'s' * (layers > 1)} of the target")  # fmt: skip
    unknown = [n for n, m in ((spec.target, target), (spec.draft, draft)) if n and m is None]
    if target is None or unknown:
        return f"memory check skipped: no local or cached config.json for {unknown[0]}"
    est = estimate(engine, target, draft, concurrency, visible_gpu_gb())
    check_fits(est, engine, concurrency)
    return est
