"""Plan mode (``plan=true``): print what a sweep would run, start nothing.

For each engine spec in launch order: how its backend starts it (``launch_lines``: the
exact ``vllm.LLM`` keyword arguments, :meth:`harness.backends.engine.EngineSpec.llm_kwargs`,
or the server's command line), the memory pre-flight
(:mod:`harness.backends.memory`), the vocab pre-flight, the pairing (an interleaved job's engine
and its baseline on one device, or why they fall back to sequential), then its jobs
with requests and maximum output tokens; totals last. Needs no GPU, no hub and no built models: problems are
counted when their files are local, otherwise the job's limit (or "all") is shown.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness import backends, speculators
from harness.backends import live, memory
from harness.backends.engine import EngineSpec
from harness.checks import looks_local, model_config
from harness.data.datasets import load_problems
from harness.results import job_name
from harness.sweep.runner import Engines, choose_engines
from harness.sweep.sweeper import Plan


def requests_of(cfg: Any) -> tuple[int | None, bool]:
    """A job's requests and whether they were counted: problems are loaded when they need no
    hub, else the job's limit is returned (None = all).

    Raises:
        DatasetError: a local dataset file is missing or malformed.
    """
    if cfg.dataset.source != "synth" and cfg.dataset.path is None:
        return cfg.limit, False
    return len(load_problems(cfg.dataset, cfg.limit)), True


def _bases(cfg: Any) -> tuple[str | None, str | None]:
    """The base target and draft: the architecture of trained models not built yet (a head
    has no base: ``harness.backends.memory`` sizes an unbuilt one as a layer of its target)."""
    return cfg.models.targets.get("base"), speculators.of(cfg.variant).unbuilt_base(cfg)


def _missing(spec: EngineSpec) -> list[str]:
    return [m for m in (spec.target, spec.draft) if m and looks_local(m) and not Path(m).is_dir()]


def pair_lines(spec: EngineSpec, cfg: Any) -> list[str]:
    """How an interleaved job's engine shares its device with its baseline (the target's
    plain engine): each engine's memory, or why the job runs alone
    (:func:`harness.sweep.runner.choose_engines` decides)."""
    if cfg.pairing != "interleaved":
        return ["  pairing: sequential (the K = 0 run is the baseline)"]
    engines = choose_engines(cfg, _bases(cfg))
    if engines.baseline is None:
        return [f"  pairing: sequential ({engines.alone}; the K = 0 run is the baseline)"]
    what = (
        "a second instance of itself (the A/A check)"
        if EngineSpec.baseline(cfg) == spec
        else "its target's plain engine"
    )
    lines = [f"  pairing: interleaved with {what}"]
    for name, est in zip(("this engine", "baseline"), engines.estimates, strict=True):
        if not isinstance(est, str):
            lines.append(f"    {name} beside the other: {est.line()}")
    return lines


def spec_lines(spec: EngineSpec, cfgs: list[Any]) -> list[str]:
    """The engine block: LLM arguments, environment, memory and vocab pre-flights, pairing.

    Raises:
        ConfigError: the engine cannot fit its GPU, or the speculator does not match the
            target (its family's ``plan_check``).
    """
    lines = backends.of(cfgs[0]).launch_lines(spec, cfgs[0])
    lines += [f"  env {key}={value}" for key, value in spec.env().items()]
    lines += [f"  note: {m} does not exist yet (build it before the sweep)" for m in _missing(spec)]
    concurrency = max(c.concurrency for c in cfgs)
    est = memory.fit(spec, concurrency, _bases(cfgs[0]))
    if isinstance(est, str):
        lines.append(f"  {est}")
    else:
        lines.append(f"  memory at concurrency {concurrency}: {est.line()}")
        lines.append(f"    from {est.basis}")
    if spec.method is not None:  # an unbuilt trained target has its base's shapes
        base = _bases(cfgs[0])[0]
        shapes = None if model_config(spec.target) or base is None else base
        config = shapes and (model_config(shapes) or memory.PUBLISHED.get(shapes))
        checked = speculators.get(spec.method).plan_check(spec.target, spec.draft, config)
        lines += [f"  {checked}"] if checked else []
    lines += pair_lines(spec, max(cfgs, key=lambda c: c.concurrency))
    if (n := max(c.instances for c in cfgs)) > 1:
        lines.append(
            f"  instances: {n} fresh engine instances (pairs when interleaved) per job, the"
            " problems split over them, start order alternating, at most two engines live"
        )
    return lines


def launches(cfgs: list[Any], engines: list[Engines]) -> int:
    """Engine starts of the jobs in order: each job's instances asked of a cache of its own
    (:meth:`harness.backends.live.Live.instance`, the live cache's rule) whose backends are specs."""
    cache = live.Live()
    planned = live.Kind("planned", start=lambda spec, same: spec, stop=lambda backend: None)
    for cfg, chosen in zip(cfgs, engines, strict=True):
        specs = (chosen.spec,) + ((chosen.baseline,) if chosen.baseline else ())
        for index in range(cfg.instances):
            cache.instance(planned, specs, index, cfg.instances > 1)
    return cache.launches(planned)


def show(planned: Plan, configs: Mapping[tuple[str, ...], Any], out: Callable = print) -> None:
    """Print the plan of a sweep (``configs``: the composed config of each planned job).

    Nothing is printed when a job cannot run as configured.

    Raises:
        ConfigError, DatasetError: a job cannot run as configured.
    """
    cfgs = [configs[tuple(job)] for job in planned.jobs]
    blocks = [
        (spec, list(group)) for spec, group in itertools.groupby(cfgs, key=EngineSpec.from_config)
    ]
    known, unknown, max_output = 0, 0, 0
    lines = [f"plan: {len(cfgs)} job(s) on {len(blocks)} engine(s) in launch order; none started"]
    for number, (spec, group) in enumerate(blocks, start=1):
        draft = f" + {spec.method} {spec.draft or ''}".rstrip() if spec.k else ""
        draft += f", K={spec.k}"
        lines.append(f"\nengine {number}/{len(blocks)}: {spec.target}{draft}")
        lines += spec_lines(spec, group)
        lines.append(f"  jobs ({len(group)}):")
        for cfg in group:
            n, counted = requests_of(cfg)
            if counted:
                known += n
                max_output += n * cfg.max_tokens
                shown = str(n)
            else:
                unknown += 1
                shown = f"{'all' if n is None else f'limit {n}'} (hub dataset, not loaded)"
            lines.append(f"    {job_name(cfg)}: requests {shown}, max_tokens {cfg.max_tokens}")
    hub = f" (+ {unknown} jobs on hub datasets, not counted)" if unknown else ""
    engines = [choose_engines(c, _bases(c)) for c in cfgs]
    lines.append(
        f"\ntotals: {len(cfgs)} job(s), {launches(cfgs, engines)} engine launch(es), "
        f"{known:,} requests, "
        f"<= {max_output:,} output tokens{hub}"
    )
    out("\n".join(lines))
