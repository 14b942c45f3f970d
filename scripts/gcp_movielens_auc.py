#!/usr/bin/env python3
"""The README's GCP example: MovieLens-100k binarized (rating >= 4 -> 1, every other
cell 0), 10 % of the positive cells held out together with as many cells drawn from
the zeros, `sptmc gcp` fitted to the rest with bernoulli-logit and with gaussian loss,
and the held-out AUC of both (plus bernoulli-logit's held-out mean log-likelihood).

    python3 scripts/gcp_movielens_auc.py --sptmc target/release/sptmc \
        [--data ../shared/data/movielens-100k.tns.gz] [--rank 10] [--epochs 30]

Needs numpy only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np


def auc(scores_pos: np.ndarray, scores_neg: np.ndarray) -> float:
    """Probability that a held-out positive scores above a held-out zero (ties half)."""
    s = np.concatenate([scores_pos, scores_neg])
    order = s.argsort(kind="mergesort")
    ranks = np.empty(len(s))
    ranks[order] = np.arange(1, len(s) + 1)
    # Average ranks over ties.
    _, inv, counts = np.unique(s, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=ranks)
    ranks = (sums / counts)[inv]
    n_pos, n_neg = len(scores_pos), len(scores_neg)
    return (ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def model_values(folder: Path, cells: np.ndarray) -> np.ndarray:
    w = np.loadtxt(folder / "weights.txt", ndmin=1)
    out = np.tile(w, (len(cells), 1))
    for m in range(cells.shape[1]):
        f = np.loadtxt(folder / f"factor-{m}.txt", ndmin=2)
        out *= f[cells[:, m]]
    return out.sum(axis=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sptmc", default="target/release/sptmc")
    p.add_argument("--data", default="../shared/data/movielens-100k.tns.gz")
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    with gzip.open(a.data, "rt") as f:
        raw = np.loadtxt(f, ndmin=2)
    subs = raw[:, :-1].astype(np.int64) - 1
    shape = tuple(int(d) for d in subs.max(axis=0) + 1)
    pos = subs[raw[:, -1] >= 4]
    rng = np.random.default_rng(a.seed)
    held = rng.random(len(pos)) < 0.1
    train, test_pos = pos[~held], pos[held]
    lin = np.ravel_multi_index(pos.T, shape)
    positives = set(lin.tolist())
    negs = []
    while len(negs) < len(test_pos):
        c = tuple(int(rng.integers(0, d)) for d in shape)
        if int(np.ravel_multi_index(c, shape)) not in positives:
            negs.append(c)
    test_neg = np.array(negs)
    tmp = Path(tempfile.mkdtemp(prefix="gcp-ml-"))
    tns = tmp / "train.tns"
    with open(tns, "w") as f:
        for s in train:
            f.write(" ".join(str(i + 1) for i in s) + " 1\n")
        # .tns has no header: an explicit 0 at the last cell keeps every mode's length.
        f.write(" ".join(str(d) for d in shape) + " 0\n")
    print(f"movielens-100k binarized: {shape}, {len(pos)} positives, "
          f"{len(train)} for training, {len(test_pos)} + {len(test_neg)} held out")
    rows = []
    for loss in ["bernoulli-logit", "gaussian"]:
        out = tmp / loss
        cmd = [a.sptmc, "gcp", str(tns), "--rank", str(a.rank), "--loss", loss,
               "--epochs", str(a.epochs), "--seed", str(a.seed), "--threads", str(a.threads),
               "--backend", "cpu", "--json", "--no-cache", "--out", str(out)]
        j = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        mp, mn = model_values(out, test_pos), model_values(out, test_neg)
        row = dict(loss=loss, auc=auc(mp, mn), seconds=j["seconds"],
                   epochs=len(j["iterations"]))
        if loss == "bernoulli-logit":
            # Mean log-likelihood of the held-out cells: log σ(m) for ones, log σ(−m) for
            # zeros.
            ll = -np.logaddexp(0, -mp).sum() - np.logaddexp(0, mn).sum()
            row["heldout_mean_loglik"] = ll / (len(mp) + len(mn))
        rows.append(row)
        print(row, flush=True)
    print("| loss | held-out AUC | held-out mean log-likelihood | epochs | seconds |")
    print("|---|---|---|---|---|")
    for r in rows:
        ll = f"{r['heldout_mean_loglik']:.4f}" if "heldout_mean_loglik" in r else "—"
        print(f"| {r['loss']} | {r['auc']:.4f} | {ll} | {r['epochs']} | {r['seconds']:.1f} |")


if __name__ == "__main__":
    main()
