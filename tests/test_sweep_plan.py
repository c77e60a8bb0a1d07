"""The sweep plan: invalid combinations dropped, baselines deduplicated, jobs ordered by engine."""

from __future__ import annotations

import itertools

import pytest

from harness.backends.engine import EngineSpec
from harness.config import ConfigError, compose_config
from harness.sweep.sweeper import plan


def _grid(**axes: str) -> list[tuple[list[str], object]]:
    """Compose every combination like Hydra's BasicSweeper (first axis slowest)."""
    jobs = []
    for values in itertools.product(*(v.split(",") for v in axes.values())):
        overrides = [f"{k.replace('__', '.')}={v}" for k, v in zip(axes, values, strict=True)]
        jobs.append((overrides, compose_config(overrides)))
    return jobs


def _axis(overrides: list[str], key: str) -> str:
    return next(o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}="))


@pytest.fixture(scope="module")
def default_grid():
    return _grid(
        variant="base,cot,cod,cot_sd,cod_sd",
        dataset="synth_easy,synth_medium,synth_hard",
        spec__k="0,1,3,5",
    )


@pytest.mark.slow  # plans the whole default grid (60 composed configs)
def test_default_grid_drops_draftless_speculation_and_duplicate_baselines(default_grid):
    planned = plan(default_grid)
    assert (planned.no_draft, planned.duplicate_baselines) == (27, 6)
    assert len(planned.jobs) == 27
    assert "dropped 27 with spec.k>0 for a variant without a draft" in planned.note()


@pytest.mark.slow
def test_each_engine_spec_runs_in_one_block_by_target_baseline_first_dataset_fastest(
    default_grid,
):
    configs = {tuple(o): c for o, c in default_grid}
    jobs = plan(default_grid).jobs
    specs = [EngineSpec.from_config(configs[tuple(o)]) for o in jobs]
    blocks = [spec for spec, _ in itertools.groupby(specs)]
    assert len(blocks) == len(set(specs)) == 9  # 3 targets at k=0 + 2 pairs x 3 K
    targets = [target for target, _ in itertools.groupby(b.target for b in blocks)]
    assert len(targets) == len(set(targets)) == 3  # a target's plain engine serves its pairs
    for target in targets:
        assert next(b.k for b in blocks if b.target == target) == 0
    assert [_axis(o, "dataset") for o in jobs[:3]] == ["synth_easy", "synth_medium", "synth_hard"]


def test_sd_baseline_is_kept_when_its_draftless_variant_is_not_swept():
    jobs = plan(_grid(variant="cot_sd", spec__k="0,2")).jobs
    assert [_axis(o, "spec.k") for o in jobs] == ["0", "2"]


def test_other_bad_values_in_a_sweep_raise():
    with pytest.raises(ConfigError, match="limit=0"):
        plan(_grid(variant="cot", limit="0,5"))


def test_nothing_dropped_means_no_note():
    assert plan(_grid(variant="cot", dataset="synth_easy,synth_hard")).note() is None


def test_jobs_that_would_share_a_results_directory_are_refused():
    with pytest.raises(ConfigError, match="would both write cot-synth_easy-k0-c1-s0-t0-n30"):
        plan(_grid(variant="cot", max_tokens="64,128"))


def test_ngram_variants_speculate_without_a_draft_and_share_their_twins_baseline():
    planned = plan(_grid(experiment="smollm2", variant="base_cot,base_cot_ngram", spec__k="0,3"))
    kept = [(_axis(o, "variant"), _axis(o, "spec.k")) for o in planned.jobs]
    assert kept == [("base_cot", "0"), ("base_cot_ngram", "3")]
    assert (planned.no_draft, planned.duplicate_baselines) == (1, 1)


def test_an_ngram_engine_loads_no_model_and_passes_the_lookup_sizes():
    cfg = compose_config(
        ["experiment=smollm2", "variant=base_cod_ngram", "spec.k=3", "spec.prompt_lookup_max=5"]
    )
    spec = EngineSpec.from_config(cfg)
    assert spec.draft is None
    assert spec.llm_kwargs()["speculative_config"] == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 5,
        "prompt_lookup_min": 2,
    }
    baseline = compose_config(["experiment=smollm2", "variant=base_cod_ngram", "spec.k=0"])
    assert EngineSpec.from_config(baseline) == EngineSpec.from_config(
        compose_config(["experiment=smollm2", "variant=base_cod"])
    )
