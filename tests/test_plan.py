"""Plan mode and the CUDA engine arguments, checked without a GPU, a hub or built models."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from test_datasets import GSM8K_ROWS, MATH_ROWS, write_jsonl
from test_memory import DRAFT, QWEN_05B, QWEN_14B, TARGET, cache_config

from harness.backends.engine import EngineSpec
from harness.config import compose_config
from harness.sweep.plan import spec_lines
from tests import cli

ROOT = Path(__file__).resolve().parent.parent
STUDY = ["experiment=qwen2.5", "variant=cot_sd", "spec.k=3"]


def harness(tmp_path, *args: str, gpu: bool = False) -> subprocess.CompletedProcess:
    """``python -m harness <args> results_dir=<tmp>`` offline, with an empty hub cache; with
    ``gpu``, as on a machine with one 80 GB GPU (``tests/fake_gpu.py``)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    module = "tests.fake_gpu" if gpu else "harness"
    return cli.run(module, *args, f"results_dir={tmp_path / 'results'}", cwd=ROOT, env=env)


def test_cuda_engine_arguments():
    kwargs = EngineSpec.from_config(compose_config([*STUDY, "engine=cuda"])).llm_kwargs()
    assert kwargs["dtype"] == "bfloat16"
    assert kwargs["enforce_eager"] is False  # CUDA graphs on
    assert kwargs["tensor_parallel_size"] == 1
    assert kwargs["gpu_memory_utilization"] == 0.9
    assert kwargs["max_model_len"] == 4096
    assert kwargs["speculative_config"] == {
        "method": "draft_model",
        "model": str(ROOT / "models/qwen2.5/draft_cot"),
        "num_speculative_tokens": 3,
        "draft_sample_method": "greedy",
    }
    assert "gpu_memory_gb" not in kwargs  # the pre-flight's, not vLLM's


def test_cuda_tp2_engine_arguments():
    kwargs = EngineSpec.from_config(compose_config([*STUDY, "engine=cuda_tp2"])).llm_kwargs()
    assert (kwargs["dtype"], kwargs["enforce_eager"]) == ("bfloat16", False)
    assert kwargs["tensor_parallel_size"] == 2
    assert kwargs["speculative_config"]["draft_tensor_parallel_size"] == 1
    assert (kwargs["gpu_memory_utilization"], kwargs["max_model_len"]) == (0.9, 4096)


def test_a_visible_gpu_switches_the_entry_point_to_engine_cuda(tmp_path):
    run = harness(tmp_path, f"models.targets.base={TARGET}", "plan=true", gpu=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "plan: 1 job(s) on 1 engine(s)" in run.stdout  # a single run plans too
    assert "dtype='bfloat16'" in run.stdout and "enforce_eager=False" in run.stdout
    assert "0.9 x the visible GPU's 80 GB" in run.stdout


@pytest.mark.slow  # composes the study's whole grid: 11-14 s
def test_plan_of_the_study_prints_engines_memory_and_totals_and_starts_nothing(tmp_path):
    run = harness(tmp_path, "-m", "experiment=qwen2.5", "plan=true")
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    # the study's grid: base, cot, cod at K = 0 and four speculative variants (two draft
    # models, two prompt lookups) at K = 1, 3, 5, 7, on three datasets
    assert "plan: 57 job(s) on 19 engine(s)" in out
    assert "model='Qwen/Qwen2.5-14B-Instruct'" in out and "max_model_len=4096" in out
    assert re.search(r"weights 29\.5 .* GB per GPU, 72\.0 GB usable", out)
    assert out.count("requests all (hub dataset, not loaded), max_tokens 1024") == 57
    for method, k in itertools.product(("draft_model", "ngram"), (1, 3, 5, 7)):
        speculative = f"'method': '{method}', 'num_speculative_tokens': {k},"
        assert out.count(speculative) == 2, speculative  # the CoT and the CoD pair
    # interleaved: each target's plain engine runs beside its speculative ones (its A/A
    # instance at K = 0), each engine with half of the GPU
    assert "totals: 57 job(s), 22 engine launch(es)" in out
    assert out.count("pairing: interleaved with its target's plain engine") == 16
    assert out.count("pairing: interleaved with a second instance of itself") == 3
    assert re.search(r"baseline beside the other: weights 29\.5 .* 36\.0 GB usable", out)
    assert not (tmp_path / "results" / "qwen2.5" / "base-gsm8k-k0-c1-s0-t0-nall").exists()


def test_plan_shows_a_pair_that_cannot_share_its_gpu_falling_back_to_sequential(tmp_path):
    run = harness(tmp_path, *STUDY, "concurrency=16", "plan=true")
    assert run.returncode == 0, run.stderr[-2000:]
    assert (
        "pairing: sequential (the pair does not fit (engine.max_model_len=4096, concurrency=16"
        in run.stdout
    )
    assert "the K = 0 run is the baseline" in run.stdout


def test_plan_that_cannot_fit_exits_2_with_one_line(tmp_path):
    args = ["engine.max_model_len=131072", "concurrency=256", "plan=true"]
    run = harness(tmp_path, "-m", "experiment=qwen2.5", "variant=base", "spec.k=0", *args)
    assert run.returncode == 2
    assert run.stdout == ""
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("error: engine.max_model_len=131072, concurrency=256: needs ~")


def test_stock_draft_with_the_14b_target_is_refused_when_their_configs_are_cached(tmp_path):
    cache_config(tmp_path / "hub", TARGET, QWEN_14B)
    cache_config(tmp_path / "hub", DRAFT, QWEN_05B)
    stock = [f"models.targets.cot={TARGET}", f"models.drafts.cot={DRAFT}", "plan=true"]
    run = harness(tmp_path, *STUDY, *stock)
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert "vocab_size 151936 differs" in line and "pad the draft's embeddings to 152064" in line


def runbook_commands() -> list[list[str]]:
    """The harness arguments of every docs/RUNBOOK.md command that runs ``python -m harness``."""
    text = (ROOT / "docs" / "RUNBOOK.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command, comments=True)
            if words[:2] == ["make", "sweep"]:
                args = next(w.split("=", 1)[1] for w in words if w.startswith("ARGS="))
                commands.append(["-m", *shlex.split(args)])
            elif "harness" in words and words[words.index("harness") - 1] == "-m":
                commands.append(words[words.index("harness") + 1 :])
    return commands


@pytest.mark.slow  # plans two whole grids: 20-30 s
def test_runbook_commands_plan_cleanly(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "gsm8k_test.jsonl", GSM8K_ROWS)
    write_jsonl(data / "math_algebra_l1-2_test.jsonl", MATH_ROWS)
    hard = [{**row, "type": "Intermediate Algebra", "level": "Level 3"} for row in MATH_ROWS]
    write_jsonl(data / "math_intermediate_algebra_l3-4_test.jsonl", hard)
    commands = runbook_commands()
    assert any(c[0] == "-m" and "experiment=qwen2.5" in c for c in commands)  # the sweep
    for args in commands:
        args = [a.replace("=DATA", f"={data}") for a in args if a != "plan=true"]
        run = harness(tmp_path, *args, "plan=true")
        assert run.returncode == 0, f"{shlex.join(args)}: {run.stderr[-2000:]}"
        assert "totals:" in run.stdout


def _head(hidden: int) -> dict:
    """A speculators EAGLE-3 config for a target of width ``hidden`` and Qwen2.5's vocab."""
    layer = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": 13824,
             "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
             "num_hidden_layers": 1, "vocab_size": 152064, "rms_norm_eps": 1e-6}  # fmt: skip
    return {"speculators_model_type": "eagle3", "draft_vocab_size": 32000,
            "eagle_aux_hidden_state_layer_ids": [2, 24, 45], "transformer_layer_config": layer}  # fmt: skip


def test_plan_of_an_eagle3_head_shows_its_arguments_memory_and_check_before_any_gpu(tmp_path):
    cache_config(tmp_path / "hub", "org/qwen-14b-eagle3", _head(5120))
    cache_config(tmp_path / "hub", "org/llama-8b-eagle3", _head(4096))
    head = ["experiment=qwen2.5", "variant=cot_eagle3", "spec.k=3", "plan=true"]
    run = harness(tmp_path, *head, "models.drafts.eagle3_cot=org/qwen-14b-eagle3")
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert "'method': 'eagle3', 'num_speculative_tokens': 3" in out
    assert "'model': 'org/qwen-14b-eagle3'" in out
    # the head's own layers are sized from its config, the target (not built) as its base
    assert re.search(r"org/qwen-14b-eagle3: 0\.\d\dB params \(config\.json \(head layers\)\)", out)
    assert "eagle3 head matches the target: hidden size 5120, vocab 152064 (drafts 32000)" in out
    run = harness(tmp_path, *head, "models.drafts.eagle3_cot=org/llama-8b-eagle3")
    assert run.returncode == 2 and run.stdout == ""
    (line,) = run.stderr.strip().splitlines()
    assert "reads hidden states of size 4096" in line and "hidden_size 5120" in line


def test_plan_of_a_job_on_a_running_server_names_it_and_pairs_nothing():
    cfg = compose_config(
        ["backend=server", "server.url=http://127.0.0.1:8000", "pairing=interleaved"]
    )
    lines = spec_lines(EngineSpec.from_config(cfg), [cfg])
    assert lines[0] == "  the running server at http://127.0.0.1:8000 (its own engine arguments)"
    assert not any("vllm.LLM(" in ln or "api_server" in ln for ln in lines)
    assert "  pairing: sequential (a server reached at server.url has no baseline beside it;" in (
        "\n".join(lines)
    )


def test_plan_of_a_serving_sweep_shows_each_servers_command_and_its_rates(tmp_path):
    run = harness(tmp_path, "-m", "serving=tiny", "plan=true")
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    # two servers (the plain CoT target, and it with its draft at K = 3), five rates each
    assert "plan: 10 job(s) on 2 engine(s)" in out and "2 engine launch(es)" in out
    commands = [ln for ln in out.splitlines() if "vllm.entrypoints.openai.api_server" in ln]
    assert len(commands) == 2 and "vllm.LLM(" not in out
    argv = shlex.split(commands[1].strip())
    spec = argv[argv.index("--speculative-config") + 1]
    assert '"method": "draft_model"' in spec and '"num_speculative_tokens": 3' in spec
    assert argv[argv.index("--max-model-len") + 1] == "1024" and "--enforce-eager" in argv
    assert "--per-request-spec-decode-metrics" in argv
    for rate in ("2", "4", "8", "16", "inf"):
        assert f"cot_sd-synth_easy-k3-c32-server-rps{rate}-s0-t0-n60" in out
    assert out.count("pairing: sequential") == 2


@pytest.mark.parametrize(
    ("overrides", "where"),
    [
        (["variant=cot_sd", "spec.k=3"], "0 (in this process)"),
        (["variant=cot_sd", "spec.k=3", "engine.multiprocessing=true"], "1 (processes of its own)"),
        (["variant=cot_ngram", "spec.k=3"], "1 (processes of its own)"),  # loads llvmlite
        (["variant=cot"], "0 (in this process)"),
    ],
)
def test_plan_says_where_each_offline_engine_runs(overrides, where):
    cfg = compose_config(overrides)
    lines = spec_lines(EngineSpec.from_config(cfg), [cfg])
    assert f"  env VLLM_ENABLE_V1_MULTIPROCESSING={where}" in lines
