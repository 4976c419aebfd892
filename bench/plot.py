#!/usr/bin/python3
# Copyright LayerPS authors. Licensed under Apache-2.0.
"""Draws a layerps-bench run: one panel per operation against message size.

Usage: layerps-bench-plot RESULTS.json OUT.png [--reference REF.json ...] [--title TEXT]

RESULTS.json is what `layerps-bench --json=FILE` writes. Panels: dense push, pull and
pushpull in GB/s against bytes per request (raw ZeroMQ of the same run dashed: one-way
streaming beside push and pull, round trips beside pushpull), and sparse push and pull in
keys/s against keys per request. Step cases (many tensors per step) are never drawn: they
are not one message size. Each point is the median over the run's repeats, with the
min..max band. --reference adds the LayerPS series of another run (another machine,
commit or system in the same JSON layout) as dotted lines, labelled with the file name or
its "label" field. The footer names the version, commit, machine, core count and date the
JSON records. Needs matplotlib (python3-matplotlib; use /usr/bin/python3).
"""
import argparse
import json
import os
import statistics
import sys

DENSE_OPS = ("push", "pull", "pushpull")


def size_label(n):
    """4096 -> '4K', 33554432 -> '32M', 100003 -> '97.7K'."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            v = n / scale
            return ("%d%s" % (v, unit)) if v == int(v) else ("%.1f%s" % (v, unit))
    return "%d" % n


def count_label(n):
    """100000 -> '100k' (keys are counted in thousands, not KiB)."""
    for unit, scale in (("M", 1000000), ("k", 1000)):
        if n >= scale:
            v = n / scale
            return ("%d%s" % (v, unit)) if v == int(v) else ("%.1f%s" % (v, unit))
    return "%d" % n


def ticks_between(lo, hi, base):
    """Powers of `base` (4: 4K, 16K, 64K...; 10 for key counts) from lo to hi, at least lo."""
    if lo is None:
        return []
    t, out = 1, []
    while t <= hi:
        if t >= lo:
            out.append(t)
        t *= base
    return out or [lo]


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit("layerps-bench-plot: cannot read %s: %s" % (path, e))
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise SystemExit("layerps-bench-plot: %s is not a layerps-bench --json file "
                         "(no 'results' list)" % path)
    return doc


def summary(values):
    values = [v for v in values if v > 0]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def series(doc, prefix=""):
    """{panel: {label: [(x, median, min, max)]}} of one run; dashed marks raw ZeroMQ."""
    out = {}
    for r in doc["results"]:
        if r.get("error") or r.get("verified") is False:
            continue
        system, mode, op = r.get("system"), r.get("mode"), r.get("op")
        topo = "%sx%s" % (r.get("servers"), r.get("workers"))
        if system == "layerps" and mode == "dense" and op in DENSE_OPS:
            panel, x, s = op, r["bytes"], summary(r.get("gbps", []))
            label = "%sLayerPS %s %s in flight %s" % (prefix, r["transport"], topo, r["inflight"])
        elif system == "layerps" and mode == "sparse" and op in ("push", "pull"):
            panel, x, s = "sparse", r["keys"], summary(r.get("keys_per_s", []))
            label = "%sLayerPS sparse %s %s %s dim %s %s in flight %s" % (
                prefix, op, r["transport"], topo, r["dim"], r.get("dist", ""), r["inflight"])
        elif system == "raw-zmq" and not prefix:
            s, x = summary(r.get("gbps", [])), r["bytes"]
            if mode == "oneway":
                panels = ("push", "pull")
                label = "raw ZeroMQ %s one-way" % r["transport"]
            else:
                panels = ("pushpull",)
                label = "raw ZeroMQ %s round trips, window %s" % (r["transport"], r["inflight"])
            for p in panels:
                if s:
                    out.setdefault(p, {}).setdefault(label, []).append((x,) + s)
            continue
        else:
            continue  # step cases, unknown modes, a reference run's raw baseline
        if s:
            out.setdefault(panel, {}).setdefault(label, []).append((x,) + s)
    return out


def footer(doc, path):
    parts = []
    if doc.get("version"):
        parts.append("LayerPS %s (commit %s)" % (doc["version"], doc.get("commit", "?")))
    machine = doc.get("machine") or doc.get("host") or "unknown machine"
    parts.append("%s, %s cores" % (machine, doc.get("cpus", "?")))
    if doc.get("date"):
        parts.append(doc["date"])
    parts.append(os.path.basename(path))
    return " · ".join(parts)


# Filled in by CMake when it writes build/bench/layerps-bench-plot (and installs it).
VERSION = "@PROJECT_VERSION@"
COMMIT = "@LAYERPS_COMMIT@"


def version_line():
    if VERSION.startswith("@"):
        return "layerps-bench-plot (LayerPS, from the source tree: no version recorded)"
    return "layerps-bench-plot (LayerPS %s, commit %s)" % (VERSION, COMMIT)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="layerps-bench-plot", description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", action="version", version=version_line())
    ap.add_argument("results", help="JSON written by layerps-bench --json")
    ap.add_argument("out", help="image to write (.png, .svg, .pdf)")
    ap.add_argument("--reference", action="append", default=[],
                    help="another run's JSON, drawn dotted (repeatable)")
    ap.add_argument("--title", default="LayerPS push/pull throughput")
    ap.add_argument("--check-metadata", action="store_true",
                    help="fail unless the JSON records version, commit, machine, cpus and date")
    args = ap.parse_args(argv)

    doc = load(args.results)
    if args.check_metadata:
        missing = [k for k in ("version", "commit", "machine", "cpus", "date") if not doc.get(k)]
        if missing:
            sys.stderr.write("layerps-bench-plot: %s lacks %s\n" % (args.results, ", ".join(missing)))
            return 1
    panels = series(doc)
    for ref in args.reference:
        rdoc = load(ref)
        name = rdoc.get("label") or os.path.splitext(os.path.basename(ref))[0]
        for panel, lines in series(rdoc, prefix="[%s] " % name).items():
            for label, pts in lines.items():
                panels.setdefault(panel, {})[label] = pts
    order = [p for p in DENSE_OPS + ("sparse",) if panels.get(p)]
    if not order:
        sys.stderr.write("layerps-bench-plot: no dense or sparse LayerPS results in %s\n" % args.results)
        return 1

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = 2 if len(order) == 4 else len(order)
    nrows = (len(order) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.9 * nrows), dpi=90,
                             squeeze=False)
    # One colour per series across every panel (the raw baselines in black and gray).
    # (tab10 and Dark2 without their grays, which would read as a baseline)
    palette = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7] + \
        [c for i, c in enumerate(plt.get_cmap("Dark2").colors) if i != 7]
    colours, raw_shades = {}, ["black", "dimgray", "darkgray"]

    def colour(label):
        if label not in colours:
            if label.startswith("raw ZeroMQ"):
                n = sum(1 for k in colours if k.startswith("raw ZeroMQ"))
                colours[label] = raw_shades[n % len(raw_shades)]
            else:
                n = sum(1 for k in colours if not k.startswith("raw ZeroMQ"))
                colours[label] = palette[n % len(palette)]
        return colours[label]

    handles = {}
    for ax, panel in zip(axes.flat, order):
        lo, hi = None, None
        for label in sorted(panels[panel]):
            pts = sorted(panels[panel][label])
            xs = [p[0] for p in pts]
            lo = min(xs) if lo is None else min(lo, min(xs))
            hi = max(xs) if hi is None else max(hi, max(xs))
            raw = label.startswith("raw ZeroMQ")
            style = "--" if raw else (":" if label.startswith("[") else "-")
            scale = 1e-6 if panel == "sparse" else 1.0
            (line,) = ax.plot(xs, [p[1] * scale for p in pts], style, marker="o", markersize=3,
                              linewidth=1.4, label=label, color=colour(label))
            if len(pts) > 1:
                ax.fill_between(xs, [p[2] * scale for p in pts], [p[3] * scale for p in pts],
                                alpha=0.12, color=line.get_color())
            handles.setdefault(label, line)
        ax.set_xscale("log")
        ax.set_xticks(ticks_between(lo, hi, 10 if panel == "sparse" else 4))
        ax.set_xticklabels([(count_label if panel == "sparse" else size_label)(t)
                            for t in ax.get_xticks()], fontsize=8)
        ax.minorticks_off()
        if lo == hi:
            ax.set_xlim(lo / 2, hi * 2)
        if panel == "sparse":
            ax.set_title("sparse push / pull")
            ax.set_xlabel("keys per request")
            ax.set_ylabel("million keys/s (median over repeats)")
        else:
            ax.set_title("dense %s" % panel)
            ax.set_xlabel("bytes per request")
            ax.set_ylabel("GB/s (median over repeats)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(order):]:
        ax.set_visible(False)
    fig.suptitle(args.title)
    labels = sorted(handles)
    ncol = 2 if len(labels) > 4 else 1
    fig.legend([handles[l] for l in labels], labels, loc="lower center", fontsize=7, ncol=ncol,
               frameon=False, bbox_to_anchor=(0.5, 0.03))
    fig.text(0.01, 0.005, footer(doc, args.results), fontsize=7, color="gray")
    # Room below the panels for the legend, so it never covers a curve.
    rows = (len(labels) + ncol - 1) // ncol
    legend_h = (0.04 + 0.13 * rows) / (3.9 * nrows)
    fig.tight_layout(rect=(0, min(0.5, legend_h + 0.03), 1, 0.96))
    fig.savefig(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
