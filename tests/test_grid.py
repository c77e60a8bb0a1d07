"""The sweep grid's expansion: the jobs a multirun's overrides give."""

from __future__ import annotations

from harness import grid


def test_the_command_lines_values_replace_the_experiments_axis_and_keep_the_others():
    jobs = grid.multirun(["experiment=tiny", "variant=cot,cod_sd", "spec.k=1"])
    datasets = {"dataset=synth_easy", "dataset=synth_medium", "dataset=synth_hard"}
    assert len(jobs) == 2 * len(datasets)  # the experiment's 7 variants and 4 Ks replaced
    assert {o for job in jobs for o in job if o.startswith("variant=")} == {
        "variant=cot",
        "variant=cod_sd",
    }
    assert {o for job in jobs for o in job if o.startswith("dataset=")} == datasets
    assert all(job.count("spec.k=1") == 1 and "experiment=tiny" in job for job in jobs)


def test_without_a_list_there_is_one_job():
    assert grid.multirun(["experiment=tiny", "variant=cot", "dataset=synth_easy", "spec.k=0"]) == [
        ["variant=cot", "dataset=synth_easy", "spec.k=0", "experiment=tiny"]
    ]
