"""Synthetic acceptance on CPU: vLLM's ``rejection_sample_method: synthetic`` accepts each
draft token with a set probability (the what-if surface), and vLLM's CPU kernels refuse it.

:func:`register_cpu_kernels` (a vLLM general plugin, ``pyproject.toml``) wraps the CPU
rejection kernels: in synthetic mode they run the Triton kernels' rule, written here in
torch; otherwise vLLM's own C++ kernels run unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def accept(
    output_token_ids: torch.Tensor,
    cu_num_draft_tokens: torch.Tensor,
    draft_token_ids: torch.Tensor,
    rejected_token_ids: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    uniform_probs: torch.Tensor,
    conditional_rates: torch.Tensor,
    rows: torch.Tensor | None,
) -> None:
    """The synthetic rule of vLLM's rejection kernels, per request in ``rows`` (None: all):
    draft position ``p`` is accepted when its uniform draw is below ``conditional_rates[p]``
    (a padded draft, id -1, never is); the first rejected position takes
    ``rejected_token_ids`` (the target's argmax or recovered token), and a request whose
    drafts were all accepted gets its bonus token after them."""
    ends = cu_num_draft_tokens.tolist()
    drafts, rejected = draft_token_ids.tolist(), rejected_token_ids.reshape(-1).tolist()
    draws, rates = uniform_probs.tolist(), conditional_rates.tolist()
    chosen = [True] * len(ends) if rows is None else rows.tolist()
    start = 0
    for request, end in enumerate(ends):
        if chosen[request]:
            row = []
            for position, i in enumerate(range(start, end)):
                if draws[i] < rates[position] and drafts[i] >= 0:
                    row.append(drafts[i])
                else:
                    row.append(rejected[i])
                    break
            else:
                row.append(int(bonus_token_ids.reshape(-1)[request]))
            output_token_ids[request, : len(row)] = torch.tensor(row, dtype=output_token_ids.dtype)
        start = end


def _greedy(original: Callable[..., None]) -> Callable[..., None]:
    def kernel(
        output_token_ids: torch.Tensor,
        cu_num_draft_tokens: torch.Tensor,
        draft_token_ids: torch.Tensor,
        target_argmax: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        is_greedy: torch.Tensor | None,
        max_spec_len: int,
        uniform_probs: torch.Tensor | None = None,
        synthetic_conditional_rates: torch.Tensor | None = None,
        SYNTHETIC_MODE: bool = False,
    ) -> None:
        if not SYNTHETIC_MODE:
            return original(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                target_argmax,
                bonus_token_ids,
                is_greedy,
                max_spec_len,
            )
        accept(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            target_argmax,
            bonus_token_ids,
            uniform_probs,
            synthetic_conditional_rates,
            is_greedy,
        )

    return kernel


def _random(original: Callable[..., None]) -> Callable[..., None]:
    def kernel(
        output_token_ids: torch.Tensor,
        cu_num_draft_tokens: torch.Tensor,
        draft_token_ids: torch.Tensor,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        recovered_token_ids: torch.Tensor,
        uniform_probs: torch.Tensor,
        is_greedy: torch.Tensor,
        max_spec_len: int,
        vocab_size: int,
        synthetic_conditional_rates: torch.Tensor | None = None,
        NO_DRAFT_PROBS: bool = False,
        SYNTHETIC_MODE: bool = False,
    ) -> None:
        if not SYNTHETIC_MODE:
            return original(
                output_token_ids,
                cu_num_draft_tokens,
                draft_token_ids,
                draft_probs,
                target_probs,
                bonus_token_ids,
                recovered_token_ids,
                uniform_probs,
                is_greedy,
                max_spec_len,
                vocab_size,
                NO_DRAFT_PROBS=NO_DRAFT_PROBS,
            )
        accept(
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            recovered_token_ids,
            bonus_token_ids,
            uniform_probs,
            synthetic_conditional_rates,
            ~is_greedy,
        )

    return kernel


def register_cpu_kernels() -> None:
    """vLLM general plugin: synthetic mode in the CPU rejection kernels (idempotent)."""
    try:
        from vllm.utils import cpu_triton_utils as cpu
    except ImportError:  # a vLLM without CPU kernels
        return
    if getattr(cpu, "_draftbench_synthetic", False):
        return
    cpu._rejection_greedy_sample_kernel_impl = _greedy(cpu._rejection_greedy_sample_kernel_impl)
    cpu._rejection_random_sample_kernel_impl = _random(cpu._rejection_random_sample_kernel_impl)
    cpu._draftbench_synthetic = True
