"""The benchmark plot script (bench/plot.py, installed as layerps-bench-plot)."""
import importlib.util
import json
import os

import pytest

PLOT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "plot.py")


def plot_module():
    spec = importlib.util.spec_from_file_location("bench_plot", PLOT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def row(system, mode, op, nbytes, gbps, keys=0, kps=(), inflight=8, transport="tcp"):
    return {"system": system, "mode": mode, "op": op, "bytes": nbytes, "gbps": list(gbps),
            "keys_per_s": list(kps), "keys": keys, "dim": 16, "dist": "uniform",
            "servers": 1, "workers": 1, "inflight": inflight, "transport": transport,
            "verified": True, "error": ""}


def run_doc():
    return {"version": "0.1.0", "commit": "abc", "machine": "vm, CPU", "cpus": 2,
            "date": "2026-11-23T00:00:00Z", "results": [
                row("layerps", "dense", "push", 4096, [1.0, 2.0, 3.0]),
                row("layerps", "dense", "push", 1 << 20, [4.0, 5.0, 6.0]),
                row("layerps", "dense", "pull", 4096, [1.5]),
                row("raw-zmq", "oneway", "stream", 4096, [2.5]),
                row("raw-zmq", "rtt", "pingpong", 4096, [0.5], inflight=1),
                row("layerps", "sparse", "push", 1600000, [], keys=100000, kps=[1e7, 2e7]),
                row("layerps", "step", "push", 409600, [9.0]),
                row("layerps", "dense", "push", 8192, [7.0]) | {"error": "timed out"},
            ]}


def test_series_one_panel_per_operation_and_no_step_cases():
    panels = plot_module().series(run_doc())
    assert sorted(panels) == ["pull", "push", "pushpull", "sparse"]
    push = panels["push"]
    layerps = [k for k in push if k.startswith("LayerPS")]
    assert len(layerps) == 1
    # Median, min, max over repeats; the failed 8 KiB case is left out.
    assert sorted(push[layerps[0]]) == [(4096, 2.0, 1.0, 3.0), (1 << 20, 5.0, 4.0, 6.0)]
    # Raw ZeroMQ one-way beside push and pull; round trips beside pushpull only.
    assert "raw ZeroMQ tcp one-way" in push and "raw ZeroMQ tcp one-way" in panels["pull"]
    assert list(panels["pushpull"]) == ["raw ZeroMQ tcp round trips, window 1"]
    sparse = list(panels["sparse"].values())
    assert sparse == [[(100000, 1.5e7, 1e7, 2e7)]]
    # The step case (9 GB/s at 400 KB) appears nowhere.
    for lines in panels.values():
        for pts in lines.values():
            assert all(p[1] != 9.0 for p in pts)


def test_size_labels_are_readable():
    m = plot_module()
    assert [m.size_label(n) for n in (4096, 65536, 1 << 20, 32 << 20)] == ["4K", "64K", "1M", "32M"]
    assert m.size_label(100003) == "97.7K"
    assert m.count_label(100000) == "100k"


def test_draws_a_png_with_a_reference_run(tmp_path):
    pytest.importorskip("matplotlib")
    res, ref, out = tmp_path / "r.json", tmp_path / "ref.json", tmp_path / "r.png"
    res.write_text(json.dumps(run_doc()))
    ref_doc = run_doc()
    ref_doc["label"] = "16-core machine"
    ref.write_text(json.dumps(ref_doc))
    assert plot_module().main([str(res), str(out), "--reference", str(ref),
                               "--check-metadata"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_refuses_what_is_not_a_bench_run(tmp_path):
    m = plot_module()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match="not a layerps-bench"):
        m.main([str(bad), str(tmp_path / "x.png")])
    nometa = tmp_path / "nometa.json"
    doc = run_doc()
    del doc["commit"]
    nometa.write_text(json.dumps(doc))
    assert m.main([str(nometa), str(tmp_path / "y.png"), "--check-metadata"]) == 1
