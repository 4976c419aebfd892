"""Medians of the A/B runs (r<round>-<variant>.csv): GB/s per case and variant, and the
ratio of each variant's median over the old build's."""
import collections
import csv
import glob
import statistics as st

d = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob("r*-*.csv")):
    v = f.split("-", 1)[1][:-4]
    for r in csv.DictReader(open(f)):
        key = f"{r['servers']}x{r['workers']} {r['op']} {int(r['bytes']) // 1024}K"
        d[key][v].append(float(r["gbps_median"]))
print(f"{'case':22s} {'old (3 runs)':20s} {'lanes=0':20s} {'lanes default':20s} 0/old def/old")
for k, vs in d.items():
    o, a, b = vs["old"], vs["lanes0"], vs["lanes_default"]
    f = lambda xs: " ".join("%.2f" % x for x in xs)
    print(f"{k:22s} {f(o):20s} {f(a):20s} {f(b):20s} {st.median(a) / st.median(o):.2f}  {st.median(b) / st.median(o):.2f}")
