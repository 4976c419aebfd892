#!/usr/bin/env python3
"""Click data with the shape of Criteo's display-advertising logs, generated from a seed.

Each sample has 13 dense features (non-negative counts, log-transformed as DLRM does),
26 sparse features (one id each, drawn from a power law over the feature's own
cardinality, then hashed to a 63-bit id) and a click label drawn from a hidden model: a
logistic function of the dense features and of one hidden weight per (feature, id), so
a model that learns the ids' embeddings can beat one that sees only the dense part. The
cardinalities are Criteo Kaggle's (3 to 10.1 million), optionally capped (`max_rows`).

Everything is a function of (seed, sample index): a worker generates its own shard of a
global batch (`batch(step, rows)` with its rows), and one process generating the whole
batch gets the same samples. numpy only; no file is read or written.

    python examples/python/criteo_synth.py --samples 5          # a few samples, printed
"""

import argparse

import numpy as np

# Criteo Kaggle's sparse-feature cardinalities (C1..C26).
CRITEO_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
                        8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
                        286181, 105, 142572)
NUM_DENSE = 13
NUM_SPARSE = 26
FEATURES = tuple(f"C{i + 1}" for i in range(NUM_SPARSE))

_M64 = (1 << 64) - 1


def _mix(x):
    """splitmix64 over uint64 values (vectorized; arithmetic wraps modulo 2^64): a good
    hash of ids and seeds."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class CriteoSynth:
    """The generator. ``max_rows`` caps every feature's cardinality (None: Criteo's;
    ``uniform_rows`` gives every feature that cardinality instead);
    ``zipf`` is the power law's exponent (ids ranked by popularity: P(rank k) ~ k^-zipf);
    ``click_rate`` the mean of the labels, roughly (Criteo's is about 0.26)."""

    def __init__(self, seed=0, max_rows=None, zipf=1.2, click_rate=0.26, hidden_scale=1.0,
                 uniform_rows=None):
        if max_rows is not None and int(max_rows) < 1:
            raise ValueError("max_rows must be >= 1 (or None)")
        if zipf <= 1.0:
            raise ValueError("zipf must be > 1")
        if not 0.0 < click_rate < 1.0:
            raise ValueError("click_rate must lie in (0, 1)")
        self.seed = int(seed)
        self.zipf = float(zipf)
        if uniform_rows is not None and int(uniform_rows) < 1:
            raise ValueError("uniform_rows must be >= 1 (or None)")
        # uniform_rows: every feature has that many ids (a table-size sweep), else Criteo's.
        base = CRITEO_CARDINALITIES if uniform_rows is None else (int(uniform_rows),) * NUM_SPARSE
        self.cardinalities = tuple(c if max_rows is None else min(c, int(max_rows)) for c in base)
        hidden = np.random.default_rng([self.seed, 1])
        self._dense_w = hidden.normal(0.0, 0.35, NUM_DENSE)
        # How much each feature's ids move the click: a few features matter a lot.
        self._feature_scale = hidden_scale * hidden.uniform(0.1, 1.0, NUM_SPARSE) ** 2
        self._bias = float(np.log(click_rate / (1.0 - click_rate))) - 0.5

    def _uniform(self, step, rows, stream, width):
        """Uniforms in (0, 1), shape (len(rows), width): a counter-based generator keyed by
        (seed, step, sample index, stream, column), so a shard of a batch draws exactly the
        numbers the whole batch would."""
        key = _mix(np.uint64((self.seed * 0x100000001B3 + int(step) * 0x9E3779B1 + stream) & _M64)
                   ^ np.uint64(0xD1B54A32D192ED03))
        cols = np.arange(width, dtype=np.uint64)
        with np.errstate(over="ignore"):
            x = _mix(_mix(rows.astype(np.uint64)[:, None] ^ key) +
                     cols[None, :] * np.uint64(0x632BE59BD9B4E019))
        return ((x >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)

    def _normal(self, step, rows, stream, width):
        u1 = self._uniform(step, rows, stream, width)
        u2 = self._uniform(step, rows, stream + 1, width)
        return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)

    def ids_of(self, feature, ranks):
        """The 63-bit hashed id of each popularity rank of feature `feature` (0..25)."""
        salt = np.uint64((self.seed * 1_000_003 + feature * 7919 + 1) & _M64)
        return (_mix(np.asarray(ranks).astype(np.uint64) ^ salt) >> np.uint64(1)).astype(np.int64)

    def hidden_weight(self, feature, ids):
        """The hidden model's weight of each id of `feature`: normal, scaled per feature,
        fixed by the seed (Box-Muller over two uniforms from the id's hash)."""
        h = _mix(np.asarray(ids).astype(np.uint64) ^ np.uint64((self.seed << 8) + feature + 0x51))
        u1 = ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
        h2 = _mix(h)
        u2 = ((h2 >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
        return self._feature_scale[feature] * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)

    def batch(self, step, rows):
        """Samples `rows` (an int array of sample indices within the step's global batch,
        e.g. np.arange(rank * b, (rank + 1) * b)) of global step `step`:
        (dense float32 (n, 13), sparse int64 (n, 26) ids, labels float32 (n,)). A sample
        depends on (seed, step, its index) only."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        # Dense: log1p of lognormal counts, a fifth of them zero (Criteo's many zeros).
        counts = np.exp(1.0 + 1.2 * self._normal(step, rows, 0, NUM_DENSE))
        counts[self._uniform(step, rows, 2, NUM_DENSE) < 0.2] = 0.0
        dense = np.log1p(np.floor(counts)).astype(np.float32)
        # Sparse: ranks from a continuous power law (inverse CDF), capped, then hashed.
        u = self._uniform(step, rows, 3, NUM_SPARSE)
        ranks = np.floor(u ** (-1.0 / (self.zipf - 1.0))) - 1.0
        caps = np.asarray(self.cardinalities, dtype=np.float64) - 1.0
        ranks = np.minimum(ranks, caps[None, :]).astype(np.uint64)
        sparse = np.empty((rows.size, NUM_SPARSE), np.int64)
        logit = self._bias + (dense.astype(np.float64) - 1.0) @ self._dense_w
        for f in range(NUM_SPARSE):
            sparse[:, f] = self.ids_of(f, ranks[:, f])
            logit = logit + self.hidden_weight(f, sparse[:, f])
        labels = (self._uniform(step, rows, 4, 1)[:, 0] < 1.0 / (1.0 + np.exp(-logit)))
        return dense, sparse, labels.astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=5, help="samples to print (default 5)")
    ap.add_argument("--max_rows", type=int, default=None, help="cap every cardinality")
    ap.add_argument("--rate", type=int, default=0,
                    help="generate this many samples and print the click rate instead")
    args = ap.parse_args()
    gen = CriteoSynth(args.seed, args.max_rows)
    if args.rate > 0:
        _, _, y = gen.batch(0, np.arange(args.rate))
        print(f"click rate over {args.rate} samples: {y.mean():.3f}")
        return
    dense, sparse, labels = gen.batch(0, np.arange(args.samples))
    for i in range(args.samples):
        print(f"label {labels[i]:.0f}  dense {np.round(dense[i], 2).tolist()}  "
              f"C1..C3 {sparse[i, :3].tolist()}")


if __name__ == "__main__":
    main()
