"""The speculator seam: every family behind one registry, each owning its rules."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

import pytest

from harness import speculators
from harness.backends.engine import EngineSpec
from harness.config import ConfigError, SharedSpecConfig, compose_config, validate
from harness.speculators import suffix


def test_every_family_is_found_and_names_its_own_method():
    assert {"draft_model", "eagle3", "eagle", "medusa", "dflash", "ngram", "mtp"} <= set(
        speculators.METHODS
    )
    for method, family in speculators.FAMILIES.items():
        assert family.method == method and family.what


def test_an_unknown_method_is_one_line_naming_the_known_ones():
    with pytest.raises(ConfigError, match=r"variant.method=eagle9: must be one of .*ngram"):
        speculators.get("eagle9")


@pytest.mark.parametrize(
    ("variant", "options"),
    [
        ("cot_sd", {"draft_sample_method": "greedy"}),
        ("cot_eagle3", {"draft_sample_method": "greedy"}),
        ("cot_ngram", {"prompt_lookup_max": 4, "prompt_lookup_min": 2}),
    ],
)
def test_a_family_builds_its_own_keys_of_speculative_config(variant, options):
    cfg = compose_config([f"variant={variant}", "spec.k=3"])
    validate(cfg)
    spec = EngineSpec.from_config(cfg).llm_kwargs()["speculative_config"]
    assert spec["method"] == cfg.variant.method and spec["num_speculative_tokens"] == 3
    assert {k: v for k, v in spec.items() if k in options} == options
    assert set(spec) - set(options) <= {"method", "num_speculative_tokens", "model"}


def test_model_free_families_load_no_checkpoint_and_draft_only_on_a_match():
    ngram, mtp, draft = (speculators.get(m) for m in ("ngram", "mtp", "draft_model"))
    assert not ngram.loads_checkpoint and ngram.can_speculate(None)
    assert not ngram.drafts_every_step and draft.drafts_every_step
    assert not draft.can_speculate(None) and draft.can_speculate("cot")
    assert not mtp.loads_checkpoint


def test_a_checkpoint_is_recognised_by_its_family(tmp_path):
    head, model = tmp_path / "head", tmp_path / "draft"
    for path, config in (
        (head, {"speculators_model_type": "eagle3", "transformer_layer_config": {}}),
        (model, {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 10}),
    ):
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
    assert speculators.of_checkpoint(str(head)).method == "eagle3"
    assert speculators.of_checkpoint(str(model)).method == "draft_model"


def test_a_checkpoint_no_family_claims_is_refused_not_taken_for_a_draft(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(ConfigError, match="no speculator family recognise"):
        speculators.of_checkpoint(str(tmp_path))


def test_two_families_of_one_method_are_refused():
    from types import SimpleNamespace

    ngram = speculators.get("ngram")
    modules = [SimpleNamespace(__name__=n, FAMILY=ngram) for n in ("a", "b")]
    with pytest.raises(ValueError, match="'ngram' is defined twice"):
        speculators.register(modules)


def test_a_family_declares_its_own_spec_keys_and_two_cannot_share_one():
    @dataclass
    class Shared:
        k: int = 0

    @dataclass
    class Lookup:
        window: int = 4

    class Family(speculators.Speculator):
        method = "lookup"
        what = "a test family"
        Options = Lookup

    schema = speculators.spec_schema(Shared, [Family(), speculators.get("mtp")])
    assert {f.name: f.default for f in fields(schema)} == {"k": 0, "window": 4}
    # ngram's keys are its own, in the composed spec group (and nowhere in the shared one)
    assert "prompt_lookup_max" not in {f.name for f in fields(SharedSpecConfig)}
    assert (
        compose_config(["variant=cot_ngram", "spec.prompt_lookup_max=6"]).spec.prompt_lookup_max
        == 6
    )
    with pytest.raises(ValueError, match=r"spec.window is declared twice"):
        speculators.spec_schema(Shared, [Family(), Family()])
    with pytest.raises(ValueError, match=r"spec.k is declared twice"):
        speculators.spec_schema(Shared, [type("K", (Family,), {"Options": Shared})()])


def test_a_family_without_a_replay_says_so(tmp_path):
    with pytest.raises(ConfigError, match="method ngram has no pre-flight replay"):
        speculators.get("ngram").replay_model(str(tmp_path))


def test_suffix_decoding_without_its_package_names_the_make_target(monkeypatch):
    monkeypatch.setattr(suffix, "installed", lambda: False)
    with pytest.raises(ConfigError) as refused:
        speculators.get("suffix").plan_check("target", None)
    assert str(refused.value) == (
        "variant.method=suffix: the arctic_inference package is not installed; "
        "run `make install-suffix` (a C++ build)"
    )


def test_suffix_decoding_is_a_model_free_family_that_names_its_package():
    cfg = compose_config(["variant=cot_suffix", "spec.k=8"])
    validate(cfg)
    spec = EngineSpec.from_config(cfg).llm_kwargs()["speculative_config"]
    assert spec == {"method": "suffix", "num_speculative_tokens": 8}
    family = speculators.get("suffix")
    assert not family.loads_checkpoint and not family.drafts_every_step
    with pytest.raises(ConfigError) as refused:
        validate(compose_config(["variant=cot_suffix", "spec.k=3",
                                 "spec.k_schedule=[[1,4,3],[5,32,0]]"]))  # fmt: skip
    assert str(refused.value) == (
        "spec.k_schedule=[[1, 4, 3], [5, 32, 0]]: method suffix drafts only at spec.k=3 "
        "(vLLM's suffix proposer takes no other K); set spec.k_schedule=null"
    )
    validate(compose_config(["variant=cot_suffix", "spec.k=3", "spec.k_schedule=[[1,4,3]]"]))
    if suffix.installed():
        assert family.plan_check("target", None) == "arctic_inference is installed"
    else:
        with pytest.raises(ConfigError, match="the arctic_inference package is not installed"):
            family.plan_check("target", None)
