"""The Hydra config tree composes, and bad values fail with one readable line."""

import re

import pytest
from omegaconf import OmegaConf

from harness.config import (
    CONF_DIR,
    ConfigError,
    check_command_line,
    compose_config,
    group_options,
    validate,
)
from tests import cli

GROUPS = ("dataset", "variant", "engine")


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_of_every_group_composes(group):
    for option in group_options(group):
        cfg = compose_config([f"{group}={option}"])
        assert OmegaConf.select(cfg, group) is not None


@pytest.mark.parametrize(
    "experiment", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
)
def test_every_experiment_composes_and_its_grid_names_its_models(experiment):
    cfg = compose_config([f"experiment={experiment}"], return_hydra_config=True)
    assert cfg.experiment == experiment
    assert "base" in cfg.models.targets
    grid = OmegaConf.select(cfg, "hydra.sweeper.params.variant", default="base,cot,cod")
    for variant in grid.split(","):
        validate(compose_config([f"experiment={experiment}", f"variant={variant}"]))


@pytest.mark.parametrize("variant", ["base", "cot", "cod"])
def test_default_variants_validate_at_k0(variant):
    validate(compose_config([f"variant={variant}"]))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["spec.k=-1"], "spec.k=-1: must be >= 0"),
        (["variant=cot", "spec.k=3"], "spec.k=3: variant cot has no draft model"),
        (["variant=cot_sd", "variant.method=ngram"], "variant.draft=cot: method ngram loads no"),
        (["variant=base_cot_ngram", "variant.method=eagle4"], "variant.method=eagle4: must be one"),
        (
            ["variant=cot_ngram", "variant.method=eagle3", "spec.k=3"],
            "variant cot_ngram has no draft",
        ),
        (
            ["variant=cot_eagle3", "variant.method=mtp"],
            "variant.draft=eagle3_cot: method mtp loads",
        ),
        (["variant=base_cot_ngram", "spec.prompt_lookup_min=5"], "spec.prompt_lookup_min=5"),
        (["limit=0"], "limit=0: must be > 0"),
        (["concurrency=0"], "concurrency=0: must be >= 1"),
        (["sentinel_requests=0"], "sentinel_requests=0: must be >= 1"),
        (["pair_window=0"], "pair_window=0: must be >= 1 or null"),
        (["temperature=inf"], "temperature=inf: must be a finite number >= 0"),
        (["temperature=nan"], "temperature=nan: must be a finite number >= 0"),
        (["temperature=-0.5"], "temperature=-0.5: must be a finite number >= 0"),
        (["variant.prompt_style=verbose"], "variant.prompt_style=verbose: must be one of"),
        (["pairing=abba"], "pairing=abba: must be one of interleaved, sequential"),
        (["backend=grpc"], "backend=grpc: must be one of offline, server"),
        (["request_rate=4"], "request_rate=4.0: open-loop arrivals need backend=server"),
        (
            ["backend=server", "server.url=http://127.0.0.1:8000", "instances=2"],
            "instances=2: needs engines the harness starts; a server at server.url is one instance",
        ),
        (["backend=server", "request_rate=0"], r"request_rate=0.0: must be > 0"),
        *[
            ([f"burstiness={b}"], rf"burstiness={re.escape(b)}: must be a finite number in \(0, ")
            for b in ("0.0", "inf", "1e+308", "nan")
        ],
        (["backend=server", "request_rate=nan"], r"request_rate=nan: must be > 0"),
        (["slo.tpot_ms=-1"], r"slo.tpot_ms=-1.0: must be > 0 or null"),
        (["server.url=localhost:8000"], "server.url=localhost:8000: must start with http"),
        (
            ["variant=cot_sd", "spec.k=3", "spec.k_schedule=[[2,4,3]]"],
            r"spec.k_schedule=\[\[2,4,3\]\]: The first batch-size range must start at 1",
        ),
        (
            ["variant=cot_sd", "spec.k=3", "spec.k_schedule=[[1,4,5],[5,8,0]]"],
            "chooses K=5 above spec.k=3",
        ),
        (["variant=cot_sd", "spec.k_schedule=[[1,4,1]]"], "needs spec.k > 0"),
        *[
            (["variant=cot_sd", "spec.k=3", f"spec.k_schedule={bad}"], "three integers each")
            for bad in ("[[1,4]]", "[[1,4,3],[5,8]]", "[[1,4,1.5]]", "[[a,4,3]]", "[1,4,3]", "4")
        ],
        (
            ["variant=cot_sd", "spec.k=3", "spec.k_schedule=[[4,8,3],[1,3,1]]"],
            r"ranges must be sorted by batch size \(\[\[1,3,1\],\[4,8,3\]\]\)",
        ),
    ],
)
def test_out_of_range_values_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_config(overrides))


def test_typed_schema_rejects_wrong_type():
    with pytest.raises(Exception, match=r"spec\.k"):
        compose_config(["spec.k=three"])


def test_unknown_dataset_fails_when_composing():
    with pytest.raises(Exception, match="dataset/nope"):
        compose_config(["dataset=nope"])


def test_dataset_check_cli_prints_counts_and_agreement():
    run = cli.run("harness.data.datasets", "dataset=synth_medium", "limit=25")
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert "problems:  25" in out
    assert "agreement: 100.00%" in out


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("dataset=nope", "error: dataset=nope: unknown; choose from gsm8k, "),
        ("variant=cot,cot_sdd", "error: variant=cot_sdd: unknown; choose from base, "),
        ("spec.k=-1", "error: spec.k=-1: must be >= 0 (0 = no speculation)"),
    ],
)
def test_bad_override_fails_with_one_line_before_any_engine(override, line):
    proc = cli.run("harness", override)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(line)
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("[[2,4,3]]", "The first batch-size range must start at 1"),
        ("[[1,4,5],[5,8,0]]", "chooses K=5 above spec.k=3"),
        ("[[1,4,1.5]]", "three integers each"),
        ('"[[1,4,3],[5,32,0]]"', "a list, not a string: drop the quotes"),
    ],
)
def test_a_bad_k_schedule_on_the_command_line_is_refused_for_its_own_fault(schedule, message):
    args = ["variant=cot_sd", "spec.k=3", f"spec.k_schedule={schedule}"]
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_command_line(args)
