"""Studies as code: a study's config, its runner (dirty tree, the drift sentinel's re-runs,
compacted raw data, provenance) and ``python -m reports --check`` on its folder; the
numbers a committed study's README quotes are in its tables."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from test_reaper import engine_core_started

from harness import provenance, results
from reports import load, markdown, peers, sentinel
from reports import study as folder
from study import config, raw, runner
from tests import cli, run_fixtures

ROOT = Path(__file__).resolve().parents[1]
V = {v.name: v for v in run_fixtures.SEED_STUDY}


def test_an_unknown_study_lists_the_known_ones():
    with pytest.raises(
        config.StudyError, match=r"study 'nope': no nope.yaml \(known: .*smoke.*tiny"
    ):
        config.load("nope")


@pytest.mark.parametrize("name", config.known())
def test_every_committed_study_config_loads(name):
    study = config.load(name)
    assert study.sweeps or study.peers is not None
    assert study.rerun_flagged >= 0 and study.bootstrap >= 10


def test_peers_are_a_list_of_options_and_a_study_may_run_them_alone(tmp_path):
    (tmp_path / "alone.yaml").write_text("experiment: smollm2\npeers: [--parts, serve]\n")
    alone = config.load("alone", tmp_path)
    assert alone.peers == ("--parts", "serve") and alone.sweeps == ()
    (tmp_path / "bad.yaml").write_text("experiment: tiny\npeers: serve\n")
    with pytest.raises(config.StudyError, match=r"bad.yaml: peers=serve \(a list of bench"):
        config.load("bad", tmp_path)
    (tmp_path / "empty.yaml").write_text("experiment: tiny\n")
    with pytest.raises(config.StudyError, match=r"name at least one \(or run peers\)"):
        config.load("empty", tmp_path)


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (["--rates", "2"], "peers: unknown option --rates"),
        (["--serve-rates", "2,0"], "peers: --serve-rates=2,0: distinct rates above 0"),
        (["--latency-rounds", "many"], "peers: argument --latency-rounds: invalid int value"),
        (["--parts", "serve,hf,bench"], "peers: --parts=serve,hf,bench: a comma list of"),
    ],
)
def test_bad_peers_options_are_one_line_before_any_step(options, line):
    config.check_peers(config.load("peers"))  # the committed study's options pass
    bad = dataclasses.replace(config.load("peers"), peers=tuple(options))
    with pytest.raises(config.StudyError, match=re.escape(line)):
        config.check_peers(bad)


def test_a_study_config_with_an_unknown_key_is_one_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("experiment: tiny\nsweeps: [{name: a, grdi: {}}]\n")
    with pytest.raises(config.StudyError, match=r"sweeps\[0\]: unknown key grdi \(known: "):
        config.load("bad", tmp_path)


def test_builds_must_be_a_list_of_override_lists(tmp_path):
    (tmp_path / "bad.yaml").write_text("experiment: tiny\nbuilds: true\nsweeps: [{name: a}]\n")
    with pytest.raises(config.StudyError, match=r"bad.yaml: builds=True \(a list of override"):
        config.load("bad", tmp_path)


@pytest.mark.parametrize(
    ("name", "override", "line"),
    [
        ("tiny", "spec.k=abc", "error: spec.k=abc: expected an integer"),
        ("smoke", "limit=0", "error: limit=0: must be > 0 or null"),  # seen once composed
        ("smoke", "hydra.run.dir=elsewhere", "error: hydra.run.dir=elsewhere: Hydra's files go"),
    ],
)
def test_a_bad_override_is_refused_before_any_step_runs(name, override, line, tmp_path):
    run = cli.run("study", "--docs-dir", str(tmp_path / "docs"), name, override,
                  f"results_dir={tmp_path / 'runs'}", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 2 and run.stdout == "", run.stderr[-2000:]
    assert run.stderr.strip().startswith(line) and len(run.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no step ran: nothing built, nothing written


# a step's command that takes a second to stop on SIGINT, and a study process running it
SLOW_TO_STOP = """
import signal, sys, time
def stop(*_):
    time.sleep(1)  # longer than subprocess.run's 0.25 s before it kills
    print("step stopped", flush=True)
    sys.exit(130)
signal.signal(signal.SIGINT, stop)
print("step started", flush=True)
time.sleep(60)
"""
STUDY = f"""
import sys
from study.runner import Runner
try:
    Runner().execute([sys.executable, "-c", {SLOW_TO_STOP!r}])
except KeyboardInterrupt:
    print("study interrupted", flush=True)
"""


def test_ctrl_c_lets_the_step_stop_before_the_study_goes_on():
    proc = subprocess.Popen([sys.executable, "-c", STUDY], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, start_new_session=True,
                            preexec_fn=cli.ctrl_c_reaches)  # fmt: skip
    try:
        assert proc.stdout.readline() == "step started\n"
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: its whole process group
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert out.splitlines() == ["step stopped", "study interrupted"]


@pytest.mark.slow  # starts an engine
@pytest.mark.engine_processes
def test_ctrl_c_during_a_study_is_the_harness_line_then_the_study_line(tiny_pair, tmp_path):
    runs, err = tmp_path / "runs", tmp_path / "stderr"
    command = [sys.executable, "-m", "study", "--docs-dir", str(tmp_path / "docs"), "smoke",
               "allow_dirty=true", f"models.targets.cot={tiny_pair[0]}", f"results_dir={runs}",
               "engine.multiprocessing=true"]  # fmt: skip
    with err.open("w") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, cwd=ROOT,
                                start_new_session=True,
                                preexec_fn=cli.ctrl_c_reaches)  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while not engine_core_started(proc.pid):  # the sweep step's engine starts
                assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.1)
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C
            proc.wait(timeout=180)
        finally:
            proc.kill()
    text = err.read_text()
    assert proc.returncode == 130 and "Traceback" not in text, text[-3000:]
    assert "interrupted: job cot-synth_easy-k0-c1-s0-t0-n2 stopped" in text  # the harness's
    assert text.strip().splitlines()[-1] == (
        f"interrupted: study smoke stopped; its finished runs are kept in {runs} "
        "(running it again resumes)"
    )


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_a_dirty_tree_is_refused_unless_allowed(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "f.txt").write_text("one\n")
    _git(tmp_path, "add", "f.txt")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    clean = provenance.git_state(tmp_path)
    runner.check_clean(clean, allow_dirty=False)
    (tmp_path / "f.txt").write_text("two\n")
    dirty = provenance.git_state(tmp_path)
    assert dirty == {"commit": clean["commit"], "dirty": True}
    with pytest.raises(config.StudyError, match=r"uncommitted changes.*allow_dirty=true"):
        runner.check_clean(dirty, allow_dirty=False)
    runner.check_clean(dirty, allow_dirty=True)
    with pytest.raises(config.StudyError, match="not a git checkout"):
        runner.check_clean(provenance.git_state(tmp_path / "nowhere"), allow_dirty=False)


class FakeRunner(runner.Runner):
    """Steps without engines: a sweep writes the runs it lacks from ``run_fixtures``, each
    drifting as ``within`` says (by job name: a list, one entry per time it is written)."""

    def __init__(self, results_dir: Path, within: dict[str, list[float]]):
        super().__init__()
        self.results_dir, self.within = results_dir, within
        self.sweeps = 0

    def execute(self, argv: list[str]) -> int:
        assert argv[1:4] == ["-m", "harness", "-m"]
        sweep = next(a.removeprefix("sweep=") for a in argv if a.startswith("sweep="))
        self.sweeps += 1
        for variant, k in (("cot", 0), ("cot_sd", 1)):
            job = run_fixtures.Job(sweep, V[variant], "synth_easy", "easy", k, n_problems=20)
            drifts = self.within.get(job.name, [1.0])
            if not (self.results_dir / sweep / job.name).exists():
                within = drifts.pop(0) if len(drifts) > 1 else drifts[0]
                run_fixtures.write_job(self.results_dir, dataclasses.replace(job, within=within))
        return 0


def _study(**kw) -> config.Study:
    return config.Study(**{**vars(config.load("smoke")), "rerun_flagged": 2, **kw})


def _run_fake(tmp_path: Path, within: dict[str, list[float]], **kw) -> tuple[Path, FakeRunner]:
    fake = FakeRunner(tmp_path / "results", within)
    path = runner.run(_study(**kw), [], tmp_path / "results", tmp_path / "docs",
                      allow_dirty=True, step=fake)  # fmt: skip
    return path.parent, fake


SD = "cot_sd-synth_easy-k1-c1-s0"  # run_fixtures' job name


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A study of two runs, no flags, made once for the tests that read or edit a copy."""
    base = tmp_path_factory.mktemp("made")
    return _run_fake(base, {})[0]


@pytest.fixture
def study_copy(made, tmp_path) -> Path:
    """A copy of :func:`made`'s study folder for a test to edit."""
    return Path(shutil.copytree(made, tmp_path / made.parent.name / made.name))


@pytest.mark.parametrize("given", ["datasets_dir=data/sets", "++datasets_dir=data/sets"])
@pytest.mark.usefixtures("unrasterized")
def test_each_build_runs_before_the_sweeps_with_the_command_lines_datasets(tmp_path, given):
    class Recording(FakeRunner):
        def execute(self, argv: list[str]) -> int:
            if argv[1:3] == ["-m", "train.build"]:
                self.builds.append(argv[3:])
                return 0
            return super().execute(argv)

    fake = Recording(tmp_path / "results", {})
    fake.builds = []
    study = _study(builds=((), ("styles=[cod]", "eagle3.answers=1000")))
    path = runner.run(study, [given, "seed=0"], tmp_path / "results",
                      tmp_path / "docs", allow_dirty=True, step=fake)  # fmt: skip
    assert fake.builds == [
        ["experiment=tiny", "datasets_dir=data/sets"],
        ["experiment=tiny", "styles=[cod]", "eagle3.answers=1000", "datasets_dir=data/sets"],
    ]
    record = json.loads((path.parent / folder.STUDY_JSON).read_text())
    assert [s["step"] for s in record["steps"]] == ["models 1", "models 2", "sweep smoke"]


class Stamping(FakeRunner):
    """Runs stamped with the commit ``provenance.git_state`` gives, as the harness stamps them."""

    def execute(self, argv: list[str]) -> int:
        status = super().execute(argv)
        for summary in self.results_dir.glob(f"*/*/{results.SUMMARY}"):
            data = json.loads(summary.read_text())
            if not data.get("git"):  # a run made now
                data["git"] = {"commit": provenance.git_state()["commit"], "dirty": False}
                summary.write_text(json.dumps(data))
        return status


@pytest.mark.usefixtures("unrasterized")
def test_a_later_make_keeps_the_steps_of_the_makes_whose_runs_it_keeps(tmp_path, monkeypatch):
    def make(commit: str, remake: list[str]) -> tuple[list[tuple[str, str]], str]:
        monkeypatch.setattr(provenance, "git_state", lambda *_: {"commit": commit, "dirty": False})
        for job in remake:
            shutil.rmtree(tmp_path / "results" / "smoke" / job)
        fake = Stamping(tmp_path / "results", {})
        report = runner.run(_study(), [], tmp_path / "results", tmp_path / "docs", step=fake)
        record = json.loads((report.parent / folder.STUDY_JSON).read_text())
        return [(s["step"], s["commit"][0]) for s in record["steps"]], report.read_text()

    a, b, c = "a" * 40, "b" * 40, "c" * 40
    assert make(a, [])[0] == [("sweep smoke", "a")]
    steps, text = make(b, [SD])  # the K = 0 run made at a stays
    assert steps == [("sweep smoke", "a"), ("sweep smoke", "b")]
    assert f"at 2 commits (each step's in the table), the last `{b[:12]}`" in text
    assert f"| sweep smoke | `{a[:12]}` |" in text
    steps, text = make(c, [SD, "cot-synth_easy-k0-c1-s0"])  # nothing of a or b is left
    assert steps == [("sweep smoke", "c")]
    assert f"at commit `{c[:12]}` from a clean tree" in text and "| sweep smoke | `" not in text


@pytest.mark.usefixtures("unrasterized")
def test_a_study_runs_only_the_sweeps_named_and_keeps_the_others_committed_runs(
    tmp_path, monkeypatch
):
    smoke = _study().sweeps[0]
    study = _study(sweeps=(smoke, dataclasses.replace(smoke, name="later")))
    docs = tmp_path / "docs"
    monkeypatch.setattr(provenance, "git_state", lambda *_: {"commit": "a" * 40, "dirty": False})
    first = runner.run(study, [], tmp_path / "results", docs,
                       step=Stamping(tmp_path / "results", {})).parent  # fmt: skip
    committed = {p.relative_to(first): p.read_bytes() for p in (first / "raw" / "smoke").rglob("*")
                 if p.is_file()}  # fmt: skip
    # a new checkout at a later commit: no runs of its own, only the committed folder
    monkeypatch.setattr(provenance, "git_state", lambda *_: {"commit": "b" * 40, "dirty": False})
    fake = Stamping(tmp_path / "fresh", {})
    again = runner.run(study, [], tmp_path / "fresh", docs, step=fake, only=("later",)).parent
    assert [s.step for s in fake.steps] == ["sweep later"]
    kept = {p.relative_to(again): p.read_bytes() for p in (again / "raw" / "smoke").rglob("*")
            if p.is_file()}  # fmt: skip
    assert kept == committed
    record = folder.read_study(again)
    assert sorted(record["raw"]["jobs"]) == sorted(f"{s}/{j}" for s in ("smoke", "later")
                                                   for j in ("cot-synth_easy-k0-c1-s0", SD))  # fmt: skip
    steps = [(s["step"], s["commit"][0]) for s in record["steps"]]
    assert steps == [("sweep smoke", "a"), ("sweep later", "a"), ("sweep later", "b")]
    with pytest.raises(config.StudyError, match=r"sweep smoke has no committed runs in .*name it"):
        runner.run(study, [], tmp_path / "fresh", tmp_path / "elsewhere", step=fake,
                   only=("later",))  # fmt: skip


class Peering(Stamping):
    """The peers step writes two rounds of one comparison to the ``--csv`` it is given."""

    def execute(self, argv: list[str]) -> int:
        if argv[1:3] != ["-m", "bench.peers"]:
            return super().execute(argv)
        rounds = [peers.Round("vllm bench serve TPOT", "m", 0, "2 req/s", i, 50.0 + i, 50.0,
                              "ms", peers.SERVE_BOUND) for i in (1, 2)]  # fmt: skip
        peers.write_rounds(rounds, Path(argv[argv.index("--csv") + 1]))
        return 0


@pytest.mark.usefixtures("unrasterized")
def test_the_peers_step_runs_after_the_sweeps_and_its_table_regenerates(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "git_state", lambda *_: {"commit": "a" * 40, "dirty": False})
    study = _study(peers=("--parts", "serve"))
    fake = Peering(tmp_path / "results", {})
    out = runner.run(study, [], tmp_path / "results", tmp_path / "docs", step=fake).parent
    assert [s.step for s in fake.steps] == ["sweep smoke", "peers"]
    assert fake.steps[1].command.endswith(f"--parts serve --csv {tmp_path}/results/peers.csv")
    committed = (out / folder.RAW / peers.ROUNDS).read_bytes()
    assert committed == (tmp_path / "results" / peers.ROUNDS).read_bytes()
    report = (out / folder.REPORT).read_text()
    assert "## draftbench beside its peers" in report
    assert "| vllm bench serve TPOT | `m` | 0 | 2 req/s | 2 |" in report
    assert "`raw/peers.csv`: every round of the peers step" in report
    ratio = pd.read_csv(out / peers.TABLE)["ratio"].iloc[0]  # written to 6 digits
    assert ratio == pytest.approx((51 * 52) ** 0.5 / 50, rel=1e-5)
    assert folder.check(out) == []
    # sweeps=smoke runs that sweep alone: the committed rounds stay as they are
    again = Peering(tmp_path / "fresh", {})
    runner.run(study, [], tmp_path / "fresh", tmp_path / "docs", step=again, only=("smoke",))
    assert [s.step for s in again.steps] == ["sweep smoke"]
    assert (out / folder.RAW / peers.ROUNDS).read_bytes() == committed


def test_a_sweep_the_study_lacks_is_named_with_the_ones_it_has():
    study = _study()
    assert config.check_only(study, "smoke") == ("smoke",)
    with pytest.raises(
        config.StudyError, match=r"sweeps=smoke,nope: no sweep nope \(study smoke has: smoke\)"
    ):
        config.check_only(study, "smoke,nope")


@pytest.mark.usefixtures("unrasterized")
def test_a_flagged_run_is_rerun_until_it_passes(tmp_path):
    out, fake = _run_fake(tmp_path, {SD: [1.3, 1.2, 1.01]})
    record = json.loads((out / folder.STUDY_JSON).read_text())
    assert fake.sweeps == 3  # the sweep, then two re-runs of the flagged run
    (rerun,) = record["sentinel"]["reruns"]
    assert rerun["job"] == SD and not rerun["flagged"]
    assert rerun["drifts"] == pytest.approx([0.3, 0.2, 0.01])
    assert [p.name for p in runner.attempts(tmp_path / "results" / "smoke", SD)] == [
        f"{SD}.1", f"{SD}.2"]  # fmt: skip
    assert [s["step"] for s in record["steps"]] == ["sweep smoke", *["re-run flagged smoke"] * 2]
    text = (out / folder.REPORT).read_text()
    flagged = text.split("## Flagged runs")[1].split("## Seed hypotheses")[0]
    assert f"| `{SD}` | +30.0%, +20.0%, +1.0% | re-run 2x, replaced |" in flagged


@pytest.mark.usefixtures("unrasterized")
def test_a_run_still_flagged_is_kept_listed_and_its_verdict_widened(tmp_path):
    out, fake = _run_fake(tmp_path, {SD: [1.3]}, rerun_flagged=1)
    assert fake.sweeps == 2  # one re-run, still flagged: kept
    (rerun,) = json.loads((out / folder.STUDY_JSON).read_text())["sentinel"]["reruns"]
    assert rerun["flagged"] and rerun["drifts"] == pytest.approx([0.3, 0.3])
    text = (out / folder.REPORT).read_text()
    top = text.split("## Seed hypotheses")[0]
    assert (
        f"| `{SD}` | +30.0%, +30.0% | re-run 1x, kept flagged |" in top.split("## Flagged runs")[1]
    )
    assert "sentinel drift 30.0%" in text  # H2's interval widened by the move
    flagged = sentinel.flagged(load.load(out / folder.RAW).runs)
    assert list(flagged["run_id"]) == [SD]


@pytest.mark.parametrize(
    ("pairing", "within", "flags"),
    [("sequential", 1.08, True), ("interleaved", 1.08, False), ("interleaved", 1.25, True)],
)
def test_an_interleaved_run_is_flagged_only_past_its_wider_drift(tmp_path, pairing, within, flags):
    """8% within a run flags a sequential run (> 5%), not an interleaved one (> 20%): the
    study's re-runs and the report's list apply the same rule."""
    job = run_fixtures.Job("smoke", V["cot_sd"], "synth_easy", "easy", 1, n_problems=5,
                           pairing=pairing, within=within)  # fmt: skip
    run_fixtures.write_job(tmp_path, job)
    assert (job.name in runner.flagged_runs(tmp_path / "smoke")) == flags
    assert (job.name in set(sentinel.flagged(load.load(tmp_path).runs)["run_id"])) == flags


def test_a_run_flagged_under_an_earlier_bound_is_listed_as_within_todays(tmp_path):
    """A study made when 5% flagged every run records an interleaved run at +10% as kept
    flagged; its report lists the run and judges the kept run by today's rule."""
    job = run_fixtures.Job("smoke", V["cot_sd"], "synth_easy", "easy", 1, n_problems=5,
                           pairing="interleaved", within=1.1)  # fmt: skip
    record = {"rerun_flagged": 0,
              "reruns": [{"sweep": "smoke", "job": job.name, "drifts": [0.1], "flagged": True}]}  # fmt: skip
    run_fixtures.write_job(tmp_path, job)
    rows = sentinel.outcomes(sentinel.flagged(load.load(tmp_path).runs), record)
    assert rows[["run_id", "reruns", "flagged"]].values.tolist() == [[job.name, 0, False]]
    assert markdown._outcome(rows.iloc[0]) == "not re-run, within the bound now"


@pytest.mark.usefixtures("unrasterized")
def test_a_study_folder_regenerates_and_check_names_a_changed_table(made, study_copy):
    out = study_copy
    assert folder.check(out) == []
    text = (out / folder.REPORT).read_text()
    git = provenance.git_state()
    assert ("**Made from a dirty tree**" in text) == bool(git["dirty"])
    body = text.split("2 runs from 1 sweep(s) under `raw` (smoke)")[1]  # after the preface
    assert str(made.parent) not in body  # nothing of where it was made: it regenerates anywhere
    table = pd.read_csv(out / "aggregates.csv")
    table.loc[0, "accuracy"] += 0.01
    table.to_csv(out / "aggregates.csv", index=False)
    (out / "figures" / "extra.png").write_bytes(b"")
    done = cli.run("reports", "--check", str(out), cwd=ROOT)
    assert done.returncode == 1
    assert f"{out}/aggregates.csv: column accuracy, row 1" in done.stderr
    assert f"{out}/figures/: committed" in done.stderr and "extra.png" in done.stderr


@pytest.mark.usefixtures("unrasterized")
def test_check_passes_on_a_copy_anywhere_and_lists_every_difference(made, tmp_path):
    copy = Path(shutil.copytree(made, tmp_path / "elsewhere" / "deeper" / "copy"))
    assert folder.check(copy) == []  # its link to docs/METRICS.md points elsewhere from here
    report = copy / folder.REPORT
    lines = report.read_text().splitlines()
    edited = [i for i, line in enumerate(lines) if line.startswith("|")][::3][:8]
    for i in edited:
        lines[i] += " edited"
    report.write_text("\n".join(lines) + "\n")
    said = [p for p in folder.check(copy) if p.startswith(f"{folder.REPORT}: ")]
    assert said[-1].startswith(f"{folder.REPORT}: and ") and said[-1].endswith(
        " more differing lines"
    )
    assert f"line {edited[0] + 1}: {lines[edited[0]]!r} committed" in said[0]
    assert len(said) == folder.SHOWN + 1
    shutil.rmtree(copy / folder.RAW / "smoke" / SD)
    assert folder.check(copy)[:2] == [
        f"raw/smoke/{SD}: missing (study.json lists it)",
        "raw/: study.json records 2 runs, 1 are there",
    ]


def test_raw_runs_are_compacted_and_read_back_complete(made):
    out = made
    for job in load.job_dirs(load.stored_sweeps(out / folder.RAW)):
        summary = results.complete_summary(job)  # the recorded sha256 is the copy's
        assert summary["compacted"]["dropped_columns"] == list(raw.DROPPED)
        assert summary["compacted"]["original_requests_sha256"] != summary["requests_sha256"]
    record = json.loads((out / folder.STUDY_JSON).read_text())
    assert record["raw"]["runs"] == 2 and record["raw"]["bytes"] < 200_000


@pytest.mark.usefixtures("unrasterized")
def test_a_readme_number_missing_from_the_tables_is_named(study_copy):
    out = study_copy
    speedup = pd.read_csv(out / "aggregates.csv")["speedup_tpot"].dropna().iloc[-1]
    (out / folder.README).write_text(
        f"Speculation ran {speedup:.2f}x faster; not 9.99x or 0.123.\n"
    )
    assert folder.unquoted(out) == ["0.123", "9.99"]
    assert "README.md: quotes 9.99, which no table holds" in folder.check(out)


# re-made studies (a study.json beside their raw runs); the legacy ones are hand-typed
STUDIES = sorted(p.parent for p in (ROOT / "docs" / "results").glob(f"*/{folder.STUDY_JSON}"))


@pytest.mark.parametrize("study_dir", STUDIES, ids=lambda p: p.name)
def test_every_committed_study_readme_quotes_only_its_tables(study_dir):
    assert (study_dir / folder.README).is_file(), "a committed study says what it shows"
    assert folder.unquoted(study_dir) == []


def test_the_sentinel_evidence_readme_quotes_only_its_tables():
    """docs/results/sentinel-evidence (bench/sentinel.py's tables, not a study)."""
    evidence = ROOT / "docs" / "results" / "sentinel-evidence"
    assert len(folder.quoted((evidence / folder.README).read_text())) >= 5
    assert folder.unquoted(evidence) == []


@pytest.mark.slow  # regenerates each committed study's report (seconds per study)
@pytest.mark.parametrize("study_dir", STUDIES, ids=lambda p: p.name)
def test_every_committed_study_regenerates_as_committed(study_dir):
    assert folder.check(study_dir) == []


@pytest.mark.slow
def test_a_small_study_runs_checks_and_reruns_a_flagged_run(tiny_pair, tmp_path):
    """Two jobs on one engine; then one run's stored sentinel made to read +50% and the
    study run again: that run alone is moved aside and re-run (a second engine)."""
    target, _ = tiny_pair
    models = [f"models.targets.cot={target}"]
    results_dir, docs = tmp_path / "results", tmp_path / "docs"
    smoke = config.load("smoke")
    runner.run(smoke, models, results_dir, docs, allow_dirty=True, rerun_limit=0)
    out = docs / "smoke"
    assert folder.check(out) == []
    jobs = sorted(p.name for p in (out / folder.RAW / "smoke").iterdir())
    assert len(jobs) == 2
    sizes = [
        sum(f.stat().st_size for f in (out / folder.RAW / "smoke" / j).iterdir()) for j in jobs
    ]
    assert max(sizes) < 50_000

    path = results_dir / "smoke" / jobs[0] / results.SUMMARY
    summary = json.loads(path.read_text())
    summary["reference"]["end_s"] = summary["reference"]["start_s"] * 1.5
    path.write_text(json.dumps(summary))
    runner.run(smoke, models, results_dir, docs, allow_dirty=True, rerun_limit=1)
    record = json.loads((out / folder.STUDY_JSON).read_text())
    mine = [r for r in record["sentinel"]["reruns"] if r["job"] == jobs[0]]
    assert mine and mine[0]["drifts"][0] == pytest.approx(0.5)
    assert (results_dir / "smoke" / runner.FLAGGED / f"{jobs[0]}.1").is_dir()
    kept = json.loads((out / folder.RAW / "smoke" / jobs[0] / results.SUMMARY).read_text())
    assert kept["reference"]["end_s"] != summary["reference"]["end_s"]  # the re-run's own
    # the first make's sweep stays in the table (its other run is still in the study)
    names = [s["step"] for s in record["steps"]]
    assert names[:3] == ["sweep smoke", "sweep smoke", "re-run flagged smoke"]
    done = subprocess.run([sys.executable, "-m", "reports", "--check", str(out)],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
