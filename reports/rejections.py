"""What kind of token the draft gets rejected on (runs with detailed per-step metrics).

``rejection_tokens`` holds, per request, the decoded text the target emitted at each
rejected draft position; :func:`token_kinds` gives each text one of :data:`KINDS`, by the
first rule that matches (the rules: docs/METRICS.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

KINDS = ("digit", "operator", "word", "whitespace", "latex", "other")
CONFIG = (
    "sweep_id",
    "target",
    "target_role",
    "variant",
    "draft",
    "prompt_style",
    "dataset",
    "difficulty",
)
COLUMNS = (*CONFIG, "kind", "count", "share", "per_1k_tokens")


def token_kinds(texts: pd.Series) -> pd.Series:
    """The kind (one of :data:`KINDS`) of each token text."""
    core = texts.str.strip()
    kind = np.select(
        [
            core.eq("").to_numpy(bool),
            texts.str.contains(r"[\\{}$^_]", regex=True).to_numpy(bool),
            core.str.fullmatch(r"[\d.,]*\d[\d.,]*").to_numpy(bool),
            core.str.fullmatch(r"[-+*/=×÷·<>≤≥()\[\]%]+").to_numpy(bool),
            core.str.fullmatch(r"[^\W\d_]+").to_numpy(bool),
        ],
        ["whitespace", "latex", "digit", "operator", "word"],
        default="other",
    )
    return pd.Series(kind, index=texts.index, dtype="str")


def rejection_kinds(requests: pd.DataFrame) -> pd.DataFrame:
    """Rejections per kind for every configuration with recorded rejection tokens (all K
    and concurrencies pooled): count, share of its rejections, and rejections per 1,000
    output tokens of the requests that recorded them."""
    recorded = requests[requests["rejection_tokens"].notna() & (requests["k"] > 0)]
    if recorded.empty:
        return pd.DataFrame(columns=COLUMNS)
    lists = pa.chunked_array(pa.array(recorded["rejection_tokens"].array)).combine_chunks()
    rows = pc.list_parent_indices(lists).to_numpy()
    tokens = pd.Series(lists.flatten().to_numpy(zero_copy_only=False), dtype="str")
    labels = recorded[list(CONFIG)].iloc[rows].reset_index(drop=True)
    counts = (
        labels.assign(kind=token_kinds(tokens))
        .groupby([*CONFIG, "kind"], dropna=False)
        .size()
        .unstack("kind", fill_value=0)
        .reindex(columns=list(KINDS), fill_value=0)
        .stack()
        .rename("count")
        .reset_index()
    )
    output = recorded.groupby(list(CONFIG), dropna=False)["output_tokens"].sum().rename("_out")
    counts = counts.merge(output.reset_index(), on=list(CONFIG))
    total = counts.groupby(list(CONFIG), dropna=False)["count"].transform("sum")
    counts["share"] = counts["count"] / total
    counts["per_1k_tokens"] = 1000 * counts["count"] / counts.pop("_out")
    return counts[list(COLUMNS)]
