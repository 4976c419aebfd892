"""The summaries the benchmark scripts compute from their raw logs (bench/placement_summary.py
for bench/placement_interleaved.sh)."""
import importlib.util
import os

HERE = os.path.dirname(__file__)


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "..", "..", "bench", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_line(strategy, median):
    return (f"{strategy:9} 80.00 s for 21 steps = 3.800 s/step; after the first: median {median:.3f} s/step "
            f"[3.0, 5.0]; workers' payload 477.3 MB/step  loss 2.3018")


LOG = [
    "# 2-core machine, commit abc",
    "## repeat 1 allreduce (21:58:22)",
    run_line("allreduce", 3.9), run_line("stanza2", 3.5),
    "## repeat 2 allreduce (22:01:39)",
    run_line("allreduce", 4.1), run_line("stanza2", 3.9),
    run_line("allreduce", 3.8), run_line("stanza2", 3.7),
    "## prediction",
    "| asked | strategy | cut | predicted s/step | workers' MB/step |",
    "| uniform | uniform | - | 6.079 | 4297.6 |",
    "| park at classifier.0 | park | classifier.0 | 5.479 | 477.3 |",
    "| allreduce | allreduce | - | 3.286 | 6446.5 |",
    "| stanza, 2 FC node(s) | stanza | classifier.0 | 3.240 | 477.3 |",
    "| auto | allreduce | - | 3.286 | 6446.5 |",
]


def test_placement_summary_without_uniform_compares_what_ran():
    """Medians over the repeats, measured / predicted, and auto's pick against the fastest
    measured; uniform's speed-up is left out when uniform did not run (a run of only
    allreduce and stanza2 once crashed the summary on an empty list)."""
    s = load("placement_summary")
    runs, predicted, auto = s.parse(LOG)
    assert runs == {"allreduce": [3.9, 4.1, 3.8], "stanza2": [3.5, 3.9, 3.7]}
    assert predicted == {"uniform": 6.079, "park": 5.479, "allreduce": 3.286, "stanza2": 3.240}
    assert auto == 3.286
    out = s.summary(runs, predicted, auto)
    assert out[1].startswith("allreduce    3.900 [3.800, 4.100] over 3 repeats  predicted 3.286")
    assert "measured/predicted 1.19" in out[1] and "uniform" not in out[1]
    assert out[2].startswith("stanza2      3.700 [3.500, 3.900]")
    assert out[3] == ("fastest measured: stanza2; fastest predicted: stanza2, 1.00x the fastest measured step "
                      "(within 5%)")
    assert out[4] == "auto picks allreduce (predicted 3.286), 1.05x the fastest measured step (NOT within 5%)"


def test_placement_summary_with_uniform_and_an_auto_pick_not_run():
    s = load("placement_summary")
    log = [run_line("uniform", 6.5), run_line("park", 3.25), "| uniform | uniform | - | 6.000 | 1.0 |",
           "| auto | stanza | fc6 | 2.000 | 1.0 |"]
    out = s.summary(*s.parse(log))
    assert "1.00x uniform  predicted 6.000, measured/predicted 1.08" in out[1]
    assert out[2].startswith("park         3.250 [3.250, 3.250] over 1 repeats  2.00x uniform")
    assert out[-1] == "auto's pick (predicted 2.000) was not run here"
