"""Memory and vocab pre-flights from config.json files (published Qwen2.5 architectures)."""

from __future__ import annotations

import json

import pytest

from harness.backends import memory
from harness.backends.engine import EngineSpec
from harness.checks import config_vocab_size
from harness.config import ConfigError, compose_config
from harness.speculators.draft_model import check_vocab_sizes

# Published config.json fields (Hugging Face model cards of Qwen2.5).
QWEN_14B = {
    "model_type": "qwen2",
    "num_hidden_layers": 48,
    "hidden_size": 5120,
    "intermediate_size": 13824,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
QWEN_05B = {
    "model_type": "qwen2",
    "num_hidden_layers": 24,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
TARGET, DRAFT = "Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"


def model_dir(tmp_path, name, config):
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def cache_config(cache, repo_id: str, config: dict) -> None:
    """Put ``config`` in a Hugging Face cache folder as the hub's config.json of ``repo_id``."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache; ``add(repo_id, config)`` puts a config.json in it."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return lambda repo_id, config: cache_config(cache, repo_id, config)


def test_parameters_and_weights_match_the_published_figures(tmp_path):
    big = memory.load_model(model_dir(tmp_path, "14b", QWEN_14B), "auto")
    small = memory.load_model(model_dir(tmp_path, "05b", QWEN_05B), "auto")
    assert big.arch.params() / 1e9 == pytest.approx(14.7, abs=0.1)  # "14.7B"
    assert big.weights_gb() == pytest.approx(29.5, abs=0.1)
    assert small.arch.params() / 1e9 == pytest.approx(0.49, abs=0.01)  # "0.49B", tied
    assert small.weights_gb() == pytest.approx(1.0, abs=0.02)
    assert memory.load_model(model_dir(tmp_path, "f32", QWEN_05B), "float32").weights_gb() == (
        pytest.approx(2 * small.weights_gb())
    )


def test_kv_cache_bytes_per_token_from_layers_kv_heads_and_head_dim(tmp_path):
    big = memory.load_model(model_dir(tmp_path, "14b", QWEN_14B), "bfloat16")
    assert big.arch.kv_bytes_per_token(2) == 2 * 48 * 8 * 128 * 2  # GQA: 8 of 40 heads


def test_the_study_pair_fits_one_80_gb_gpu_and_tp2_halves_the_target(tmp_path):
    target = memory.load_model(model_dir(tmp_path, "14b", QWEN_14B), "bfloat16")
    draft = memory.load_model(model_dir(tmp_path, "05b", QWEN_05B), "bfloat16")
    one = dict(compose_config(["engine=cuda"]).engine)
    est = memory.estimate(one, target, draft, concurrency=1)
    kv = (2 * 48 * 8 * 128 * 2 + 2 * 24 * 2 * 64 * 2) * 4096 / 1e9
    assert est.total_gb == pytest.approx(29.5 + 0.99 + kv + memory.OVERHEAD_GB, abs=0.1)
    assert est.limit_gb == pytest.approx(72.0)  # 0.9 x engine.gpu_memory_gb=80
    memory.check_fits(est, one, 1)
    two = dict(compose_config(["engine=cuda_tp2"]).engine)
    halved = memory.estimate(two, target, draft, concurrency=1)
    assert halved.weights_gb == pytest.approx(29.5 / 2 + 0.99, abs=0.05)  # draft TP 1


def test_a_job_that_cannot_fit_is_refused_with_one_line(tmp_path):
    target = memory.load_model(model_dir(tmp_path, "14b", QWEN_14B), "bfloat16")
    engine = {**compose_config(["engine=cuda"]).engine, "max_model_len": 131072}
    est = memory.estimate(engine, target, None, concurrency=256)
    with pytest.raises(ConfigError, match=r"^engine\.max_model_len=131072, concurrency=256: ") as e:
        memory.check_fits(est, engine, 256)
    assert "\n" not in str(e.value)


def test_a_visible_gpu_replaces_the_configured_size(tmp_path):
    target = memory.load_model(model_dir(tmp_path, "14b", QWEN_14B), "bfloat16")
    engine = dict(compose_config(["engine=cuda"]).engine)
    est = memory.estimate(engine, target, None, concurrency=1, visible_gb=24.0)
    with pytest.raises(ConfigError, match="visible GPU's 24 GB"):
        memory.check_fits(est, engine, 1)


def test_unbuilt_models_take_their_base_architecture_and_cpu_is_not_checked(tmp_path):
    cfg = compose_config(["experiment=qwen2.5", "variant=cot_sd", "spec.k=3"])
    est = memory.fit(EngineSpec.from_config(cfg), 1, (TARGET, DRAFT))
    assert f"as {TARGET}" in est.basis and f"as {DRAFT}" in est.basis
    cpu = compose_config(["variant=cot_sd", "spec.k=3"])
    assert memory.fit(EngineSpec.from_config(cpu), 1) == ("memory check skipped: engine.device=cpu")


def test_unknown_hub_model_skips_the_memory_check(hub_cache):
    cfg = compose_config(["experiment=qwen2.5", "models.targets.base=org/unknown-model"])
    note = memory.fit(EngineSpec.from_config(cfg), 1)
    assert note == "memory check skipped: no local or cached config.json for org/unknown-model"


def test_hub_vocab_sizes_come_from_the_cache_else_the_check_is_skipped(hub_cache):
    assert config_vocab_size(TARGET) is None
    assert check_vocab_sizes(TARGET, DRAFT) == (
        f"vocab check skipped: no local or cached config.json for {TARGET}"
    )
    hub_cache(TARGET, QWEN_14B)
    hub_cache(DRAFT, QWEN_05B)
    assert config_vocab_size(TARGET) == 152064
    with pytest.raises(ConfigError, match=r"151936 differs .* 152064.*pad the draft's embeddings"):
        check_vocab_sizes(TARGET, DRAFT)


def test_the_shipped_published_configs_match_the_model_cards():
    assert memory.PUBLISHED == {TARGET: QWEN_14B, DRAFT: QWEN_05B}
