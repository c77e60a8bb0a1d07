"""What a person reads: progress that suits a terminal or a log file, and quiet libraries.

In a terminal, progress bars redraw in place. Written to a file or a pipe (SLURM, CI,
``make sweep > log``), a redrawn bar becomes one line of tens of thousands of
characters, so there a bar prints a whole line every :data:`LOG_INTERVAL_S` seconds,
library bars (datasets' ``map``, the trainer's steps) are off, and vLLM logs warnings
only: the harness's own lines (stage, job, calibration, report path) stay readable.
A variable the user set (``VLLM_LOGGING_LEVEL``, ``HF_DATASETS_DISABLE_PROGRESS_BARS``)
wins.
"""

from __future__ import annotations

import os
import sys
from typing import Any

LOG_INTERVAL_S = 10.0  # seconds between progress lines in a log file
LOG_BAR = "{desc}: {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}{postfix}]\n"


def interactive() -> bool:
    """Whether progress goes to a terminal (stderr, where bars and logs go)."""
    return sys.stderr.isatty()


def progress(total: int, desc: str, unit: str, disable: bool = False) -> Any:
    """A tqdm bar: redrawn in a terminal, a line every :data:`LOG_INTERVAL_S` in a log."""
    from tqdm import tqdm

    if interactive():
        return tqdm(total=total, desc=desc, unit=unit, disable=disable)
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=disable,
        mininterval=LOG_INTERVAL_S,
        bar_format=LOG_BAR,
        ascii=True,
    )


def quiet_libraries() -> None:
    """Outside a terminal: vLLM logs warnings only and datasets draws no bars (call before
    importing vllm or datasets; engine processes inherit it)."""
    if interactive():
        return
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
