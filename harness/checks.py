"""Input checks that need the file system or a tokenizer (config-only ones: ``config.validate``).

Each raises :class:`ConfigError` with one line naming the bad key and value, before
any engine starts.
"""

from __future__ import annotations

import ast
import errno
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache, wraps
from pathlib import Path
from typing import Any

from harness import console
from harness.errors import ConfigError, DatasetError


def looks_local(name: str) -> bool:
    """True for a path on disk; False for a Hugging Face id (``org/name``).

    Absolute, ``./``, ``../`` and ``~`` paths and anything with two or more slashes are
    local, as is any name that exists on disk.
    """
    return (
        Path(name).expanduser().exists() or name.startswith(("/", ".", "~")) or name.count("/") >= 2
    )


def resolve_model(name: str) -> str:
    """An absolute path for a local model directory (symlinks not followed, so a model
    under a linked ``models/`` is recorded inside the checkout); a hub id unchanged."""
    return os.path.abspath(Path(name).expanduser()) if looks_local(name) else name


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")  # a model directory's weight files


def check_model_dir(key: str, name: str) -> None:
    """A local model name must be an existing directory with a readable config.json and
    weights."""
    if not looks_local(name):
        return
    if not Path(name).expanduser().is_dir():
        raise ConfigError(f"{key}={name}: model directory not found")
    if model_config(name) is None:
        raise ConfigError(f"{key}={name}: no config.json in the model directory")
    files = sorted(Path(name).expanduser().iterdir())
    if not any(p.suffix in WEIGHT_SUFFIXES for p in files):
        raise ConfigError(
            f"{key}={name}: no model weights (*{', *'.join(WEIGHT_SUFFIXES)}) in the directory"
        )
    for path in files:
        if path.suffix == ".safetensors" and (why := _safetensors_header_fault(path)):
            raise ConfigError(f"{key}={name}: {path.name} is not a safetensors file ({why})")


def _safetensors_header_fault(path: Path) -> str | None:
    """What is wrong with a safetensors file's header (8 bytes of its JSON's length, then
    the JSON), None when it reads; the tensors' bytes are vLLM's to check."""
    size = path.stat().st_size
    with path.open("rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if length > size - 8:
            return f"its header claims {length} bytes, the file has {size}"
        try:
            json.loads(f.read(length))
        except ValueError:
            return "its header is not JSON"
    return None


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


def load_causal_lm(name: str, role: str) -> Any:
    """A causal LM on CPU in float32 for a teacher-forced pass (``role`` names it in the
    error); one line (ConfigError) when its weights do not load, instead of transformers'
    load report and traceback."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        return AutoModelForCausalLM.from_pretrained(name, dtype="float32").eval()
    except (OSError, RuntimeError, ValueError) as exc:
        text = str(exc).strip() or type(exc).__name__
        why = (
            "tensor shapes differ from its config.json"
            if "mismatched_sizes" in text or "size mismatch" in text
            else text.splitlines()[0]
        )
        raise ConfigError(f"{role}={name}: its weights do not load ({why})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


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
    if k > (limit := vllm_max_spec_len()):
        raise ConfigError(f"spec.k={k}: vLLM accepts at most {limit} draft tokens per step")


@lru_cache(maxsize=1)
def vllm_max_spec_len() -> int:
    """vLLM's largest K (its rejection sampler's ``MAX_SPEC_LEN``), read without importing vLLM."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        raise ConfigError("vLLM is not installed: run `make install`")
    source = Path(spec.origin).parent / "v1" / "sample" / "rejection_sampler.py"
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            "MAX_SPEC_LEN"
        ]:
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{source} no longer sets MAX_SPEC_LEN: update vllm_max_spec_len")


# a folder that takes no more writes: a full disk, a full quota, a read-only mount, no permission
UNWRITABLE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)


def unwritable(exc: BaseException | None) -> OSError | None:
    """The OSError in ``exc``'s chain (itself, its causes and contexts) that says a folder
    takes no more writes (:data:`UNWRITABLE`); None when there is none."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in UNWRITABLE:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


@contextmanager
def exit_on_unwritable(folder: Path) -> Iterator[None]:
    """Turn an error of a folder taking no more writes (:func:`unwritable`) into ``error:
    cannot write <its file, else folder> (<why>)`` on stderr and exit status 2: the user
    frees space or fixes the folder, then runs again (finished jobs are kept)."""
    try:
        yield
    except OSError as exc:
        if (cause := unwritable(exc)) is None:
            raise
        where = cause.filename or folder
        print(f"error: cannot write {where} ({os.strerror(cause.errno)})", file=sys.stderr)
        raise SystemExit(2) from None


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
