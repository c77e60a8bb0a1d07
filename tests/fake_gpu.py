"""``python -m tests.fake_gpu <args>``: ``python -m harness <args>`` as on a machine with one
80 GB CUDA GPU (torch and the entry point's detection answer yes; nothing else changes)."""

import runpy
import types

import torch

import harness.config

torch.cuda.is_available = harness.config.cuda_visible = lambda: True
torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(total_memory=80e9)
runpy.run_module("harness", run_name="__main__", alter_sys=True)
