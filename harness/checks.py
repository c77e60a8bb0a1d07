"""Input checks that need the file system or a tokenizer (config-only ones: ``config.validate``).

Each raises :class:`ConfigError` with one line naming the bad key and value, before
any engine starts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache, wraps
from pathlib import Path
from typing import Any

from harness import console
from harness.config import ConfigError, DatasetError


def looks_local(name: str) -> bool:
    """True for a path on disk; False for a Hugging Face id (``org/name``).

    Absolute, ``./``, ``../`` and ``~`` paths and anything with two or more slashes are
    local, as is any name that exists on disk.
    """
    return (
        Path(name).expanduser().exists() or name.startswith(("/", ".", "~")) or name.count("/") >= 2
    )


def resolve_model(name: str) -> str:
    """An absolute path for a local model directory; a hub id unchanged."""
    return str(Path(name).expanduser().resolve()) if looks_local(name) else name


def check_model_dir(key: str, name: str) -> None:
    """A local model name must be an existing directory with a readable config.json."""
    if not looks_local(name):
        return
    if not Path(name).expanduser().is_dir():
        raise ConfigError(f"{key}={name}: model directory not found")
    if model_config(name) is None:
        raise ConfigError(f"{key}={name}: no config.json in the model directory")


@lru_cache(maxsize=8)
def load_tokenizer(name: str) -> Any:
    """The Hugging Face tokenizer of a model directory or hub id (cached)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"model {name}: cannot load its tokenizer ({type(exc).__name__})"
        ) from None


def model_config(name: str) -> dict[str, Any] | None:
    """A model's config.json: from its directory, or for a hub id from the local Hugging
    Face cache (offline); None when neither has it."""
    path = Path(name).expanduser() / "config.json"
    if not path.is_file() and not looks_local(name):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
        path = Path(cached) if isinstance(cached, str) else path
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 (byte {exc.start}: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None


def config_vocab_size(name: str) -> int | None:
    """Rows of a model's embedding matrix (its config.json); None when it is not on disk."""
    config = model_config(name)
    return None if config is None else config.get("vocab_size")


def check_vocab_sizes(target: str, draft: str) -> str | None:
    """Equal embedding sizes (vLLM refuses a draft model whose vocab_size differs).

    Returns a note when a config.json is neither local nor cached (the check is skipped).
    """
    t_size, d_size = config_vocab_size(target), config_vocab_size(draft)
    if t_size is None or d_size is None:
        missing = target if t_size is None else draft
        return f"vocab check skipped: no local or cached config.json for {missing}"
    if t_size != d_size:
        raise ConfigError(
            f"draft={draft}: vocab_size {d_size} differs from target {target}'s {t_size}; "
            f"vLLM needs equal embedding sizes: pad the draft's embeddings to {t_size} rows "
            "(the training pipeline pads the drafts it trains)"
        )
    return None


def check_same_vocab(target: str, draft: str) -> None:
    """Draft and target must share the tokenizer and the embedding size (vLLM's rule)."""
    t_vocab, d_vocab = load_tokenizer(target).get_vocab(), load_tokenizer(draft).get_vocab()
    if t_vocab != d_vocab:
        differ = len(t_vocab.items() ^ d_vocab.items())
        raise ConfigError(
            f"draft={draft}: its tokenizer differs from target {target}'s "
            f"({len(d_vocab)} vs {len(t_vocab)} tokens, {differ} entries differ)"
        )
    note = check_vocab_sizes(target, draft)
    if note:
        print(note, file=sys.stderr)


def check_head(target: str, head: str, method: str, target_config: dict | None = None) -> str:
    """An EAGLE-style head (``method`` eagle3 | eagle | medusa | dflash) must read hidden
    states of the target's width, predict into its vocabulary, fuse layers it has, and the
    target must be able to host the method in vLLM. Returns the line ``plan=true`` shows:
    what was checked, or why a check was skipped (no local or cached config.json).
    ``target_config`` stands in for a target not on disk (its base's, when not built yet).

    Raises:
        ConfigError: a mismatch, naming the head, the values and the target's.
    """
    t, h = target_config or model_config(target), model_config(head)
    if t is None or h is None:
        missing = target if t is None else head
        fetch = "" if looks_local(missing) else f" (fetch it: hf download {missing} config.json)"
        return f"head check skipped: no local or cached config.json for {missing}{fetch}"
    layer = h.get("transformer_layer_config") or h  # speculators' format nests the layer's
    width = h.get("target_hidden_size") or layer.get("hidden_size")
    if width is not None and width != t.get("hidden_size"):
        raise ConfigError(
            f"draft={head}: the {method} head reads hidden states of size {width}, "
            f"target {target} has hidden_size {t.get('hidden_size')}"
        )
    vocab = layer.get("vocab_size")
    if vocab is not None and vocab != t.get("vocab_size"):
        raise ConfigError(
            f"draft={head}: the {method} head's vocabulary has {vocab} tokens, "
            f"target {target}'s {t.get('vocab_size')}"
        )
    layers = h.get("eagle_aux_hidden_state_layer_ids") or []
    fused = h.get("num_aux_hidden_states") or len(
        (h.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [None] * 3
    )  # what vLLM sizes the head's input for
    if method == "eagle3" and layers and len(layers) != fused:
        raise ConfigError(
            f"draft={head}: the eagle3 head fuses {len(layers)} layers {layers}; vLLM builds "
            f"its input for {fused} (set eagle_config.eagle_aux_hidden_state_layer_ids)"
        )
    if layers and not all(0 <= i <= t.get("num_hidden_layers", 0) for i in layers):
        raise ConfigError(
            f"draft={head}: the {method} head fuses layers {layers}, target {target} has "
            f"{t.get('num_hidden_layers')}"
        )
    hosts = target_hosts(tuple(t.get("architectures") or ()), method)
    if hosts is False:
        raise ConfigError(
            f"variant.method={method}: vLLM's {'/'.join(t['architectures'])} (target {target}) "
            f"cannot host {method} heads"
        )
    draft_vocab = h.get("draft_vocab_size") or vocab
    return f"{method} head matches the target: hidden size {width}, vocab {vocab} (drafts {draft_vocab})"


@lru_cache(maxsize=8)
def target_hosts(architectures: tuple[str, ...], method: str) -> bool | None:
    """Whether vLLM's class for ``architectures`` exposes what ``method`` reads (eagle3: the
    auxiliary hidden states; eagle: its hidden states); None when not known here."""
    if method not in ("eagle3", "eagle") or not architectures:
        return None
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import supports_eagle, supports_eagle3

    cls = ModelRegistry._try_load_model_cls(architectures[0])  # no public twin in vLLM 0.32
    if cls is None:
        return None
    return supports_eagle3(cls) if method == "eagle3" else supports_eagle(cls)


def check_mtp(target: str) -> None:
    """``method=mtp`` drafts with the target's own multi-token-prediction layers: its
    config.json must declare some (``num_nextn_predict_layers``, ``mtp_num_hidden_layers``
    and the like); skipped when the config is not on disk."""
    config = model_config(target)
    if config is None:
        return
    text = config.get("text_config") or {}
    declared = [v for c in (config, text) for k, v in c.items()
                if ("nextn_predict" in k or k.startswith("mtp_")) and isinstance(v, int)]  # fmt: skip
    if not any(v > 0 for v in declared):
        raise ConfigError(
            f"variant.method=mtp: target {target} declares no multi-token-prediction layers "
            "(num_nextn_predict_layers or mtp_* in its config.json); use another method"
        )


def check_speculator(method: str | None, target: str, draft: str | None) -> None:
    """The checks of a speculator against its target, by method: a draft model shares the
    tokenizer and embedding size; a head matches the target's width, vocabulary and layers
    (:func:`check_head`); mtp needs the target's own prediction layers (``draft`` None)."""
    if method == "mtp":
        check_mtp(target)
    elif draft is None:
        return
    elif method == "draft_model":
        check_same_vocab(target, draft)
    else:
        note = check_head(target, draft, method)
        if note.startswith("head check skipped"):
            print(note, file=sys.stderr)


def check_prompt_lengths(
    prompt_lengths: dict[str, int], max_tokens: int, max_model_len: int
) -> None:
    """Every prompt plus ``max_tokens`` must fit in ``max_model_len``."""
    problem_id, longest = max(prompt_lengths.items(), key=lambda item: item[1])
    if longest + max_tokens > max_model_len:
        raise ConfigError(
            f"engine.max_model_len={max_model_len}: problem {problem_id} needs "
            f"{longest} prompt + {max_tokens} max_tokens = {longest + max_tokens} tokens; "
            "raise engine.max_model_len or lower max_tokens"
        )


def check_spec_len(k: int, max_model_len: int) -> None:
    """``k`` draft tokens per step must fit vLLM's limit and the context (k + 1 < max_model_len)."""
    if k == 0:
        return
    if k + 1 >= max_model_len:
        raise ConfigError(
            f"spec.k={k}: k draft tokens plus the bonus token must be below "
            f"engine.max_model_len={max_model_len}"
        )
    from vllm.v1.sample.rejection_sampler import MAX_SPEC_LEN

    if k > MAX_SPEC_LEN:
        raise ConfigError(f"spec.k={k}: vLLM accepts at most {MAX_SPEC_LEN} draft tokens per step")


def _bad_input(extra: tuple[type[Exception], ...]) -> tuple[type[Exception], ...]:
    """The errors that mean bad input: ConfigError, DatasetError and ``extra``."""
    return (ConfigError, DatasetError, *extra)


def _report(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


@contextmanager
def exit_on_bad_input(*extra: type[Exception]) -> Iterator[None]:
    """Turn bad input (ConfigError, DatasetError, ``extra``) into ``error: <message>`` on
    stderr and exit status 2."""
    try:
        yield
    except _bad_input(extra) as exc:
        raise SystemExit(_report(exc)) from None


def command(
    *extra: type[Exception], doc: str | None = None
) -> Callable[[Callable[[Any], int]], Callable[[Any], int]]:
    """Decorate a command's ``main``: bad input (ConfigError, DatasetError, ``extra``) prints
    ``error: <message>`` on stderr and returns 2; with ``doc``, ``-h``/``--help`` as first
    argument prints it and returns 0. Libraries are quiet in a log (:mod:`harness.console`)."""

    def wrap(main: Callable[[Any], int]) -> Callable[[Any], int]:
        @wraps(main)
        def run(args: Any) -> int:
            if doc is not None and args and args[0] in ("-h", "--help"):
                print(doc)
                return 0
            console.quiet_libraries()
            try:
                return main(args)
            except _bad_input(extra) as exc:
                return _report(exc)

        return run

    return wrap
