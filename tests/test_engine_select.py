"""The entry point picks engine=cuda on a GPU machine unless an engine group was chosen."""

from __future__ import annotations

import pytest

from harness.config import with_engine_override


def test_cuda_is_appended_when_a_gpu_is_visible_and_no_engine_was_chosen():
    argv = ["harness", "-m", "spec.k=1,3"]
    assert with_engine_override(argv, cuda_visible=True) == [*argv, "engine=cuda"]


@pytest.mark.parametrize("choice", ["engine=cpu", "engine=cuda_tp2", "+engine=cpu"])
def test_an_explicit_engine_group_is_kept(choice):
    argv = ["harness", choice]
    assert with_engine_override(argv, cuda_visible=True) == argv


def test_engine_settings_overrides_do_not_count_as_choosing_a_group():
    argv = ["harness", "engine.max_model_len=2048"]
    assert with_engine_override(argv, cuda_visible=True)[-1] == "engine=cuda"


def test_nothing_changes_without_a_gpu():
    assert with_engine_override(["harness"], cuda_visible=False) == ["harness"]


def test_a_torch_without_cuda_libraries_sees_no_gpu_without_being_imported():
    import subprocess
    import sys

    code = "import sys; from harness.config import cuda_visible; print(cuda_visible(), 'torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import torch

    assert run.stdout.split() == [str(torch.cuda.is_available()), str(torch.cuda.is_available())]
