"""What the training sets look like: drops by reason, CoD compliance, CoT vs CoD lengths.

    python -m train.data_report experiment=tiny
    python -m train.data_report experiment=qwen2.5 tokenizer=Qwen/Qwen2.5-14B-Instruct

Reads ``<out_dir>/<experiment>/<difficulty>/`` (:mod:`train.data`) and writes
``<out_dir>/<experiment>/report/``: ``REPORT.md``, ``lengths.png`` (token lengths of the
kept CoT and CoD completions) and ``drops.png``. Lengths use the target's tokenizer
(default ``models.targets.base``; ``tokenizer=<dir or hub id>`` overrides it).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checks import command
from harness.config import ConfigError, compose_config
from train.data_config import compose_data_config

STYLES = ("cot", "cod")
LABELS = {"cot": "CoT", "cod": "CoD"}


@dataclass(frozen=True)
class LengthStats:
    """Token lengths of one set of completions."""

    n: int
    mean: float
    median: float
    p90: float
    max: int


def length_stats(lengths: Sequence[int]) -> LengthStats:
    """Mean, median, 90th percentile (nearest rank) and max; zeros for an empty set."""
    if not lengths:
        return LengthStats(0, 0.0, 0.0, 0.0, 0)
    ordered = sorted(lengths)
    p90 = ordered[max(0, -(-9 * len(ordered) // 10) - 1)]
    return LengthStats(
        len(ordered), statistics.fmean(ordered), statistics.median(ordered), float(p90), ordered[-1]
    )


@dataclass(frozen=True)
class DifficultyReport:
    """Counts from the manifest plus the token lengths of the kept completions."""

    difficulty: str
    manifest: dict[str, Any]
    lengths: dict[str, list[int]]  # style -> token length per kept example (train + val)

    def stats(self, style: str) -> LengthStats:
        return length_stats(self.lengths[style])

    def ratio(self) -> float | None:
        """Mean CoD length / mean CoT length over the same kept problems."""
        cot, cod = self.stats("cot"), self.stats("cod")
        return cod.mean / cot.mean if cot.mean else None


def completions(path: Path) -> list[str]:
    """Assistant texts of an SFT set; a line ends at a newline only (GSM8K holds U+2028)."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line)["completion"][0]["content"] for line in f if line.strip()]


def load_difficulty(directory: Path, count_tokens: Callable[[str], int]) -> DifficultyReport:
    """Read one difficulty's manifest and SFT sets and measure the completions."""
    manifest = json.loads((directory / "manifest.json").read_text())
    lengths = {
        style: [
            count_tokens(text)
            for split in ("train", "val")
            for text in completions(directory / f"{style}_{split}.jsonl")
        ]
        for style in STYLES
    }
    return DifficultyReport(directory.name, manifest, lengths)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def render_markdown(experiment: str, tokenizer: str, reports: Sequence[DifficultyReport]) -> str:
    """The markdown summary: one overview table, lengths, and drops by reason."""
    lines = [
        f"# Training data: {experiment}",
        "",
        f"Teacher: {reports[0].manifest['teacher']} ({reports[0].manifest['model']}). "
        f"Token lengths of kept completions with the `{tokenizer}` tokenizer.",
        "",
        "| difficulty | dataset | problems | sent to teacher | kept | train | val | teacher accuracy | CoD accuracy | CoD compliance |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in reports:
        c = r.manifest["counts"]
        lines.append(
            f"| {r.difficulty} | {r.manifest['dataset']} | {c['problems']} | {c['sent_to_teacher']} | {c['kept']} | "
            f"{c['train']} | {c['val']} | {_pct(c['teacher_accuracy'])} | {_pct(c['cod_accuracy'])} | "
            f"{_pct(c['cod_compliance'])} |"
        )
    lines += [
        "",
        "## Completion length (tokens)",
        "",
        "| difficulty | style | n | mean | median | p90 | max | CoD/CoT (means) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in reports:
        ratio = r.ratio()
        for style in STYLES:
            s = r.stats(style)
            shown = f"{ratio:.2f}" if style == "cod" and ratio is not None else ""
            lines.append(
                f"| {r.difficulty} | {style} | {s.n} | {s.mean:.1f} | {s.median:.1f} | {s.p90:.0f} | {s.max} | {shown} |"
            )
    reasons = sorted({reason for r in reports for reason in r.manifest["counts"]["dropped"]})
    lines += ["", "## Dropped problems by reason", ""]
    if not reasons:
        lines.append("None dropped.")
    else:
        lines += [
            "| reason | " + " | ".join(r.difficulty for r in reports) + " |",
            "| --- | " + " | ".join("---:" for _ in reports) + " |",
        ]
        for reason in reasons:
            cells = " | ".join(str(r.manifest["counts"]["dropped"].get(reason, 0)) for r in reports)
            lines.append(f"| {reason} | {cells} |")
    lines += [
        "",
        "Figures: `lengths.png` (CoT vs CoD token lengths), `drops.png` (drops by reason).",
        "",
    ]
    return "\n".join(lines)


def plot_lengths(reports: Sequence[DifficultyReport], path: Path) -> None:
    """One histogram panel per difficulty: CoT and CoD token lengths, means marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(reports), figsize=(4.5 * len(reports), 3.6), squeeze=False)
    for ax, r in zip(axes[0], reports, strict=True):
        top = max([*r.lengths["cot"], *r.lengths["cod"], 1])
        bins = list(range(0, top + top // 40 + 2, max(1, top // 40)))
        for style, color in zip(STYLES, ("tab:blue", "tab:orange"), strict=True):
            s = r.stats(style)
            ax.hist(
                r.lengths[style],
                bins=bins,
                alpha=0.6,
                color=color,
                label=f"{LABELS[style]} (mean {s.mean:.0f})",
            )
            ax.axvline(s.mean, color=color, linestyle="--", linewidth=1)
        ratio = r.ratio()
        ax.set_title(
            f"{r.difficulty}: CoD/CoT = {ratio:.2f}" if ratio is not None else r.difficulty
        )
        ax.set_xlabel("completion tokens")
        ax.set_ylabel("examples")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_drops(reports: Sequence[DifficultyReport], path: Path) -> None:
    """Kept and dropped problems per difficulty, drops stacked by reason."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reasons = sorted({reason for r in reports for reason in r.manifest["counts"]["dropped"]})
    names = [r.difficulty for r in reports]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.6 * len(reports)))
    left = [r.manifest["counts"]["kept"] for r in reports]
    ax.barh(names, left, color="tab:green", label="kept")
    for reason in reasons:
        widths = [r.manifest["counts"]["dropped"].get(reason, 0) for r in reports]
        ax.barh(names, widths, left=left, label=reason)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel("problems")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def token_counter(name: str) -> Callable[[str], int]:
    """Token count of a text with the tokenizer of a model directory or hub id."""
    from harness.checks import load_tokenizer

    try:
        tokenizer = load_tokenizer(name)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; pass tokenizer=<model dir or hub id>") from None
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


@command(doc=__doc__)
def main(argv: list[str]) -> int:
    tokenizer = next((a.split("=", 1)[1] for a in argv if a.startswith("tokenizer=")), None)
    cfg = compose_data_config([a for a in argv if not a.startswith("tokenizer=")])
    tokenizer = tokenizer or compose_config([f"experiment={cfg.experiment}"]).models.targets.base
    root = Path(cfg.out_dir) / cfg.experiment
    missing = [d for d in cfg.datasets if not (root / d / "manifest.json").is_file()]
    if missing:
        raise ConfigError(
            f"out_dir={cfg.out_dir}: no data for {', '.join(missing)} under {root}; run python -m train.data first"
        )
    count = token_counter(tokenizer)
    reports = [load_difficulty(root / d, count) for d in cfg.datasets]
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    (out / "REPORT.md").write_text(
        render_markdown(cfg.experiment, tokenizer, reports), encoding="utf-8"
    )
    plot_lengths(reports, out / "lengths.png")
    plot_drops(reports, out / "drops.png")
    print(f"wrote {out / 'REPORT.md'}, {out / 'lengths.png'}, {out / 'drops.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
