"""The model pipeline: config resolution and each trained family's trainer asked (fast), and a
micro tiny world end to end (slow)."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import speculators
from harness.config import ConfigError
from harness.speculators.base import Speculator
from train import build as pipeline
from train.build import Experiment, check_no_leak
from train.config import compose_train_config
from train.steps import Built, TrainedTarget


def test_qwen_experiment_resolves_lora_target_and_full_draft_on_cuda():
    cfg = compose_train_config(["experiment=qwen2.5"])
    exp = Experiment.load("qwen2.5")
    assert exp.targets["base"] == "Qwen/Qwen2.5-14B-Instruct"
    assert exp.drafts["base"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert (cfg.device, cfg.bf16, cfg.gradient_checkpointing) == ("cuda", True, True)
    assert cfg.engine.device == "cuda" and cfg.engine.dtype == "bfloat16"
    assert cfg.scratch is None
    assert cfg.target.lora.r > 0 and "q_proj" in cfg.target.lora.target_modules
    assert cfg.draft.lora is None


def test_tiny_experiment_trains_from_scratch_on_cpu_with_64_wide_heads():
    cfg = compose_train_config([])
    assert cfg.experiment == "tiny" and cfg.device == "cpu" and cfg.engine.device == "cpu"
    for shape in (cfg.scratch.target, cfg.scratch.draft):
        assert shape.hidden_size % 64 == 0
    weights = {
        role: s.num_layers * s.hidden_size * (4 * s.hidden_size + 3 * s.intermediate_size)
        for role, s in (("target", cfg.scratch.target), ("draft", cfg.scratch.draft))
    }
    assert weights["target"] > 1.5 * weights["draft"]  # the draft is much cheaper per token


def test_smollm2_derives_its_drafts_from_gsm8k_targets():
    cfg = compose_train_config(["experiment=smollm2", "datasets_dir=some/dir"])
    exp = Experiment.load("smollm2")
    assert cfg.scratch is None and cfg.draft_layers and cfg.difficulties == ["easy"]
    assert "base" not in exp.drafts and set(exp.drafts) == {
        "cot",
        "cod",
        "eagle3_cot",
        "eagle3_cod",
    }
    assert cfg.draft.freeze_embeddings and cfg.datasets_dir == "some/dir"
    # the distilled answers fit the engine, and the sweep asks no more tokens than they hold
    from harness.config import compose_config

    assert cfg.distil.max_tokens == compose_config(["experiment=smollm2"]).max_tokens
    assert cfg.engine.max_model_len >= cfg.target.max_length + cfg.distil.max_tokens


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["device=tpu"], "device=tpu: must be one of cpu, cuda"),
        (["experiment=nope"], "experiment=nope: no conf/train/nope.yaml"),
        (["target.lora=null"], "target.lora=None: targets are trained with LoRA"),
        (["target.rank=8"], "rank"),
        (["difficulties=[easy,extreme]"], "difficulties=extreme: must be one of easy, medium"),
        (["+scratch.pages.cot={extreme: 5}"], "scratch.pages.cot=extreme: must be one of easy"),
        (["+scratch.pages.tot={easy: 5}"], "scratch.pages=tot: must be one of cot, cod"),
        (["draft_layers=0"], "draft_layers=0: must be >= 1 or null"),
        (["styles=[cot,tot]"], "styles=tot: must be one of cot, cod"),
    ],
)
def test_bad_train_config_names_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose_train_config(overrides)


def test_a_training_row_that_is_an_eval_problem_is_refused():
    with pytest.raises(RuntimeError, match=r"1 evaluation problems in training data, e\.g\. p2"):
        check_no_leak([{"id": "p1"}, {"id": "p2"}], {"p2", "p3"}, "cot_train")


def test_every_trained_family_names_a_trainer_with_one_build():
    trained = {m: f.trained_by for m, f in speculators.FAMILIES.items() if f.trained_by}
    assert {"draft_model", "eagle3"} <= set(trained)
    for method, name in trained.items():
        assert name.startswith("train."), (method, name)
        trainer = importlib.import_module(name).build
        assert list(inspect.signature(trainer).parameters) == ["target"], (method, name)
    assert len(pipeline.trainers()) == len(trained)


def test_the_build_asks_each_registered_family_for_its_models(tmp_path, monkeypatch):
    """A family registered with a trainer of its own is built by ``train.build.run`` through
    its ``trained_by``; a family with none is not asked."""
    (tmp_path / "toy_trainer.py").write_text(
        "ASKED = []\n"
        "def build(target):\n"
        "    ASKED.append(target)\n"
        "    return {f'toy_{target.style}': f'{target.model.path}-toy'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    class Toy(Speculator):
        method, what, trained_by = "toy", "a toy", "toy_trainer"

    class Untrained(Speculator):
        method, what = "untrained", "no trainer"

    modules = [SimpleNamespace(__name__=m, FAMILY=f()) for m, f in (("t", Toy), ("u", Untrained))]
    monkeypatch.setattr(speculators, "FAMILIES", speculators.register(modules))
    sets = {
        s: {"train": {"easy": [{"id": f"{s}1"}]}, "val": {"easy": [{"id": f"{s}2"}]}}
        for s in ("cot", "cod")
    }
    monkeypatch.setattr(pipeline, "sft_sets", lambda cfg: sets)
    monkeypatch.setattr(pipeline, "eval_ids", lambda cfg: set())
    monkeypatch.setattr(
        pipeline,
        "train_model",
        lambda role, parent, *args, **kw: Built(role, f"{parent.key}>{role}"),
    )
    built = pipeline.run(compose_train_config(["experiment=qwen2.5"]))  # hub bases: nothing read

    toy = importlib.import_module("toy_trainer")
    assert [t.style for t in toy.ASKED] == ["cot", "cod"]
    for target in toy.ASKED:
        assert isinstance(target, TrainedTarget)
        assert target.model.path == f"target_{target.style}"
        assert target.rows == sets[target.style]["train"]
        assert target.base_draft.path == Experiment.load("qwen2.5").drafts["base"]
        assert built[f"toy_{target.style}"] == f"target_{target.style}-toy"
    assert set(built) == {"target_base", "draft_base", "target_cot", "target_cod", "toy_cot",
                          "toy_cod"}  # fmt: skip


MICRO = [
    "experiment=tiny",
    "scratch.vocab_size=400",
    "scratch.direct_chats=20",
    *(f"scratch.pages.{s}.{d}=10" for s in ("cot", "cod") for d in ("easy", "medium", "hard")),
    "scratch.target={hidden_size: 128, num_layers: 1, intermediate_size: 256}",
    "scratch.draft={hidden_size: 64, num_layers: 1, intermediate_size: 128}",
    "scratch.target_sft.max_steps=3",
    "scratch.draft_sft.max_steps=3",
    "target.max_steps=3",
    "target.learning_rate=0.05",  # large enough that three steps visibly move the weights
    "draft.max_steps=2",
    "distil.max_problems=4",
    "distil.max_tokens=24",
    "eagle3=null",  # a 1-layer target has no 3 layers to fuse (tests/test_eagle3.py: heads)
]


def _build(root: Path, hash_seed: str) -> subprocess.CompletedProcess:
    """``python -m train.build`` of the micro world in ``root``, with ``PYTHONHASHSEED``."""
    root.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "train.build", *MICRO],
        cwd=root,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def micro_world(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The micro world built once, in a process of its own: its root and the build."""
    root = tmp_path_factory.mktemp("micro_world")
    return root, _build(root, "1")


@pytest.mark.slow
def test_micro_world_builds_every_model_and_a_rerun_trains_nothing(
    micro_world, tmp_path, monkeypatch
):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from train.build import run

    world, build = micro_world
    assert build.returncode == 0, build.stderr[-3000:]
    shutil.copytree(world, tmp_path, dirs_exist_ok=True)  # keeps mtimes: a copy, not a build
    monkeypatch.chdir(tmp_path)  # models/tiny/, data/ and the work dir are here
    cfg = compose_train_config(MICRO)
    roles = [f"{kind}_{s}" for kind in ("target", "draft") for s in ("base", "cot", "cod")]
    stamps = {r: (tmp_path / "models/tiny" / r / "manifest.json").stat().st_mtime_ns for r in roles}

    built = run(cfg)  # this process finds every model of the other one up to date

    assert set(built) == {
        f"{kind}_{s}" for kind in ("target", "draft") for s in ("base", "cot", "cod")
    }
    exp = Experiment.load("tiny")
    assert built["target_cot"] == exp.targets["cot"] and built["draft_cod"] == exp.drafts["cod"]
    vocab = AutoTokenizer.from_pretrained(built["target_base"]).get_vocab()
    models = {}
    for role, path in built.items():
        manifest = json.loads((tmp_path / path / "manifest.json").read_text())
        assert manifest["role"] == role and manifest["steps"] > 0
        assert AutoTokenizer.from_pretrained(path).get_vocab() == vocab
        models[role] = AutoModelForCausalLM.from_pretrained(path)
    assert (
        json.loads((tmp_path / built["target_cot"] / "manifest.json").read_text())["method"]
        == "lora"
    )
    base, merged = models["target_base"].state_dict(), models["target_cot"].state_dict()
    assert base.keys() == merged.keys()  # merged: plain Qwen2 weights, no adapter left
    assert any(not torch.equal(base[k], merged[k]) for k in base)
    distilled = list((tmp_path / cfg.work_dir).glob("distil-cot-*.jsonl"))
    assert len(distilled) == 1  # the merged target served by vLLM wrote the draft's data
    assert len(distilled[0].read_text().splitlines()) == 4 * 3

    def written(models: dict[str, str]) -> dict[str, int]:
        return {
            role: (tmp_path / p / "manifest.json").stat().st_mtime_ns for role, p in models.items()
        }

    assert written(built) == stamps  # nothing was trained again

    cache = distilled[0].read_text().splitlines()
    fewer = compose_train_config([*MICRO, "distil.max_problems=3"])
    rebuilt = run(fewer)  # a subset of the answers: from the cache; new drafts, same targets
    assert distilled[0].read_text().splitlines() == cache
    after = written(rebuilt)
    assert {r for r in stamps if after[r] != stamps[r]} == {"draft_cot", "draft_cod"}
    after = written(run(compose_train_config([*MICRO, "distil.max_problems=5"])))  # one more each
    grown = distilled[0].read_text().splitlines()
    assert grown[: len(cache)] == cache and len(grown) == 5 * 3  # only the new rows distilled
    assert list((tmp_path / cfg.work_dir).glob("distil-cot-*.jsonl")) == distilled

    # drafts derived from their targets (first layer), distilled with the KL objective
    derived = compose_train_config(
        [*MICRO, "draft_layers=1", "draft.objective=kl", "draft.freeze_embeddings=true"]
    )
    rebuilt = run(derived)
    assert {r for r in stamps if written(rebuilt)[r] != after[r]} == {"draft_cot", "draft_cod"}
    for style in ("cot", "cod"):
        manifest = json.loads((tmp_path / rebuilt[f"draft_{style}"] / "manifest.json").read_text())
        init = AutoModelForCausalLM.from_pretrained(tmp_path / manifest["trained_from"])
        draft = AutoModelForCausalLM.from_pretrained(tmp_path / rebuilt[f"draft_{style}"])
        target = models[f"target_{style}"]
        assert draft.config.num_hidden_layers == 1 and draft.config.hidden_size == 128
        assert manifest["config"]["objective"] == "kl" and "teacher" in manifest["config"]
        # the cut started from the target's own first layer and embeddings; training moved
        # the layer, not the frozen embeddings
        layer = "model.layers.0.mlp.down_proj.weight"
        assert torch.equal(init.state_dict()[layer], target.state_dict()[layer])
        assert not torch.equal(draft.state_dict()[layer], init.state_dict()[layer])
        embed = "model.embed_tokens.weight"
        assert torch.equal(draft.state_dict()[embed], target.state_dict()[embed])


def _file_digests(model_dir: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(model_dir.iterdir())
        if p.suffix == ".safetensors" or p.name == "tokenizer.json"
    }


@pytest.mark.slow
def test_two_builds_in_separate_processes_give_byte_identical_models(micro_world, tmp_path):
    """Same commit and inputs, another process and PYTHONHASHSEED: the same bytes."""
    digests = []
    for root, build in (micro_world, (tmp_path, _build(tmp_path, "2"))):
        assert build.returncode == 0, build.stderr[-3000:]
        dirs = sorted((root / "models" / "tiny").glob("[!.]*"))  # not the work dir
        models = {d.name: _file_digests(d) for d in dirs}
        manifest = json.loads((root / "models/tiny/target_cot/manifest.json").read_text())
        assert f"target_cot: models/tiny/target_cot (weights {manifest['weights']})" in build.stdout
        digests.append(models)
    assert sorted(digests[0]) == [
        f"{k}_{s}" for k in ("draft", "target") for s in ("base", "cod", "cot")
    ]
    assert all(files for files in digests[0].values())
    assert digests[0] == digests[1]
