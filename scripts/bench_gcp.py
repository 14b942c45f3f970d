#!/usr/bin/env python3
"""GCP beside the peers: sptmc's `gcp` (SGD) beside GenTen's `gcp_sgd` (pygenten), and
sptmc's full-gradient method beside pyttb's `gcp_opt` (L-BFGS-B), from identical
starts. Prints a Markdown table (and writes it with --out).

SGD: the same loss, rank, sample sizes (GenTen's defaults for 100 epochs, passed to
both explicitly), epoch length, step and threads; runs alternate (GenTen, sptmc,
GenTen, sptmc) and each run's seconds per epoch and final loss estimate are reported.
The two estimates are over different fixed samples (each tool draws its own), so
they agree only to within the sampling error of the estimate; beside them each side's
final model is evaluated by one FP64 reference here (`full_loss`): the loss over every
cell, zeros included (in closed form for gaussian and poisson, by a dense pass over the
index space up to --dense-cells cells, else over a large uniform sample of zero cells,
the same for both models). Both start from the same factors: GenTen's gcp_sgd
balances an initial guess (unit columns, each component's weight spread evenly over
the modes) and sptmc does the same.

Full gradient: small slices of the shared tensors made dense for pyttb; both start
from the same factors (pyttb's normalize("all") applied first) and run to their
stopping rules (L-BFGS-B with m=10, pgtol=1e-5, factr=1e7, at most 1000 iterations).

Run with the benchmark venv's Python (numpy, pyttb, pygenten):
    /work/venv-bench/bin/python scripts/bench_gcp.py --sptmc target/release/sptmc
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

GENTEN_SNIPPET = r"""
import sys, json, numpy as np, pyttb as ttb, pygenten
a = json.loads(sys.argv[1])
d = np.load(a["npz"])
X = ttb.sptensor(d["subs"], d["vals"].reshape(-1, 1), tuple(int(s) for s in d["shape"]))
u0 = ttb.ktensor([d[f"f{m}"].copy(order="F") for m in range(len(d["shape"]))], np.ones(a["rank"]))
u, _, perf = pygenten.gcp_sgd(
    X, rank=a["rank"], loss_function_type=a["loss"], maxiters=a["epochs"],
    epoch_iters=a["epoch_iters"], rate=a["rate"], seed=a["seed"], printitn=1, init=u0,
    num_samples_nonzeros_grad=a["g_nz"], num_samples_zeros_grad=a["g_z"],
    num_samples_nonzeros_value=a["f_nz"], num_samples_zeros_value=a["f_z"])
np.savez(a["model"], weights=np.asarray(u.weights, dtype=np.float64).ravel(),
         **{f"f{m}": np.asarray(f, dtype=np.float64) for m, f in enumerate(u.factor_matrices)})
"""


def read_tns(path: Path):
    """Coordinates (0-based) and values of a .tns(.gz) file, duplicates summed as sptmc
    sums them (pyttb's `sptensor`, which hands the tensor to GenTen, keeps them apart,
    and the full loss below would count them apart too)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        a = np.loadtxt(f, dtype=np.float64, ndmin=2)
    subs = a[:, :-1].astype(np.int64) - 1
    vals = a[:, -1]
    unique, inverse = np.unique(subs, axis=0, return_inverse=True)
    if len(unique) < len(subs):
        print(f"{path.name}: {len(subs) - len(unique)} duplicate entries summed", file=sys.stderr)
        vals = np.bincount(inverse.ravel(), weights=vals, minlength=len(unique))
        subs = unique
    return subs, vals, tuple(int(s) for s in subs.max(axis=0) + 1)


def write_tns(path: Path, subs, vals):
    with open(path, "w") as f:
        for s, v in zip(subs, vals):
            f.write(" ".join(str(i + 1) for i in s) + f" {v:.17g}\n")


def genten_samples(nnz: int, cells: float, epochs: int = 100):
    """GenTen's default sample sizes (its formulas, for `epochs` epochs)."""
    f_nz = min(max((nnz + 99) // 100, 100000), nnz)
    f_z = int(min(f_nz, cells - nnz))
    g_nz = min(max((3 * nnz + epochs - 1) // epochs, 1000), nnz)
    g_z = int(min(g_nz, cells - nnz))
    return f_nz, f_z, g_nz, g_z


def run_genten(args_json: dict, threads: int):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", GENTEN_SNIPPET, json.dumps(args_json)],
        capture_output=True, text=True, env=env,
    )
    # pygenten's module aborts in Kokkos' finalization at interpreter exit, after the
    # run has printed everything: judge the run by its output, not its status.
    if "Final f-est" not in out.stdout:
        raise RuntimeError(f"gcp_sgd failed: {out.stderr[-2000:]}")
    wall = time.perf_counter() - start
    epochs = [
        (float(m.group(1)), float(m.group(2)))
        for m in re.finditer(r"Epoch\s+\d+: f-est =\s*(\S+), step =\s*\S+, time =\s*(\S+) sec",
                             out.stdout)
    ]
    final = float(re.search(r"Final f-est:\s*(\S+)", out.stdout).group(1))
    secs = epochs[-1][1] / len(epochs) if epochs else float("nan")
    d = np.load(args_json["model"])
    model = (d["weights"], [d[f"f{m}"] for m in range(len(d.files) - 1)])
    return final, secs, wall, model


def run_sptmc(exe: str, tns: Path, init: Path, a: dict, threads: int, method: str = "sgd",
              out_dir: Path | None = None):
    cmd = [exe, "gcp", str(tns), "--rank", str(a["rank"]), "--loss", a["loss"],
           "--init", str(init), "--backend", "cpu", "--threads", str(threads), "--json",
           "--no-cache", "--method", method]
    if out_dir is not None:
        cmd += ["--out", str(out_dir)]
    if method == "sgd":
        cmd += ["--epochs", str(a["epochs"]), "--epoch-iters", str(a["epoch_iters"]),
                "--rate", str(a["rate"]), "--seed", str(a["seed"]),
                "--grad-nonzeros", str(a["g_nz"]), "--grad-zeros", str(a["g_z"]),
                "--value-nonzeros", str(a["f_nz"]), "--value-zeros", str(a["f_z"])]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    j = json.loads(out.stdout)
    it = j["iterations"]
    secs = it[-1]["seconds"] / len(it) if it else float("nan")
    model = None
    if out_dir is not None:
        w = np.loadtxt(out_dir / "weights.txt", ndmin=1)
        fs = [np.loadtxt(out_dir / f"factor-{m}.txt", ndmin=2) for m in range(len(j["dims"]))]
        model = (w, fs)
    return j["final_loss"], secs, wall, j, model


EPS = 1e-10


def loss_values(loss: str, x, m):
    """f(x, m) elementwise, the formulas (and floor EPS) of sptmc, pyttb and GenTen."""
    if loss == "gaussian":
        return (x - m) ** 2
    if loss == "poisson":
        return m - x * np.log(m + EPS)
    if loss == "bernoulli-odds":
        return np.log(m + 1.0) - x * np.log(m + EPS)
    if loss == "poisson-log":
        return np.exp(m) - x * m
    raise ValueError(loss)


def model_at(subs, weights, factors, chunk: int = 1 << 18):
    """The model's values at the coordinates `subs` (k x N)."""
    out = np.empty(len(subs))
    for a in range(0, len(subs), chunk):
        s = subs[a:a + chunk]
        p = np.broadcast_to(weights, (len(s), len(weights))).copy()
        for n, f in enumerate(factors):
            p *= f[s[:, n]]
        out[a:a + chunk] = p.sum(axis=1)
    return out


def zero_sum(loss: str, shape, weights, factors, subs, dense_cells: float, zero_draws: int):
    """Σ f(0, m) over every cell of the index space, and how it was taken.

    Closed form for gaussian (Σ m² = λᵀ(⊛ AᵀA)λ) and poisson (Σ m = Σ_r λ_r Π colsums);
    otherwise a dense pass (mode 0 a row at a time against the Khatri-Rao product of
    the others) when the space has at most `dense_cells` cells, else the mean over
    `zero_draws` uniform cells (the same draws, seed 0, for every model) times the
    number of cells, with its standard error."""
    cells = float(np.prod(np.array(shape, dtype=np.float64)))
    if loss == "gaussian":
        h = np.ones((len(weights), len(weights)))
        for f in factors:
            h *= f.T @ f
        return float(weights @ h @ weights), "closed form"
    if loss == "poisson":
        return float(np.sum(weights * np.prod([f.sum(axis=0) for f in factors], axis=0))), \
            "closed form"
    if cells <= dense_cells:
        rest = factors[1]
        for f in factors[2:]:
            rest = (rest[:, None, :] * f[None, :, :]).reshape(-1, len(weights))
        total = 0.0
        for a0 in factors[0]:
            m = rest @ (weights * a0)
            total += float(np.sum(loss_values(loss, 0.0, m)))
        return total, "dense"
    rng = np.random.default_rng(0)
    draws = np.stack([rng.integers(0, d, zero_draws) for d in shape], axis=1)
    v = loss_values(loss, 0.0, model_at(draws, weights, factors))
    return float(v.mean() * cells), f"sampled ({zero_draws} cells, s.e. {v.std() / np.sqrt(zero_draws) / max(abs(v.mean()), 1e-300):.1e} rel.)"


def full_loss(loss: str, subs, vals, shape, model, dense_cells: float, zero_draws: int):
    """F = Σ_nz [f(x, m) − f(0, m)] + Σ_all f(0, m) of `model` (weights, factors)."""
    weights, factors = model
    m = model_at(subs, weights, factors)
    nz = float(np.sum(loss_values(loss, vals, m) - loss_values(loss, 0.0, m)))
    z, how = zero_sum(loss, shape, weights, factors, subs, dense_cells, zero_draws)
    return nz + z, how


def balance(factors):
    """Unit columns, each component's norm product spread evenly over the modes (GenTen
    normalize + distribute, pyttb normalize("all"))."""
    norms = [np.linalg.norm(f, axis=0) for f in factors]
    lam = np.prod(norms, axis=0)
    share = lam ** (1.0 / len(factors))
    return [f / np.where(n > 0, n, 1.0) * share for f, n in zip(factors, norms)]


def write_init(folder: Path, factors):
    folder.mkdir(parents=True, exist_ok=True)
    for m, f in enumerate(factors):
        np.savetxt(folder / f"factor-{m}.txt", f, fmt="%.17g")


def sgd_rows(exe, name, subs, vals, shape, args, tmp: Path):
    rows = []
    cells = float(np.prod(np.array(shape, dtype=np.float64)))
    f_nz, f_z, g_nz, g_z = genten_samples(len(vals), cells)
    wanted = args.losses.split(",")
    for loss, transform in [("gaussian", None), ("bernoulli", "binary"), ("poisson", "counts"),
                            ("poisson-log", "counts")]:
        sp_loss = "bernoulli-odds" if loss == "bernoulli" else loss
        if sp_loss not in wanted:
            continue
        v = vals
        if transform == "binary":
            v = np.ones_like(vals)
        elif transform == "counts" and not np.all((vals >= 0) & (vals == np.round(vals))):
            continue
        rng = np.random.default_rng(args.seed)
        factors = [rng.random((d, args.rank)) for d in shape]
        # Scale the start so that the model's norm is the tensor's, as both do.
        norm_m = np.sqrt(np.sum(np.prod([f.T @ f for f in factors], axis=0)))
        s = (np.linalg.norm(v) / norm_m) ** (1.0 / len(shape))
        factors = [f * s for f in factors]
        if args.balance_start:
            factors = balance(factors)
        tns = tmp / f"{name}-{transform or 'raw'}.tns"
        if not tns.exists():
            write_tns(tns, subs, v)
        npz = tmp / f"{name}-{loss}.npz"
        np.savez(npz, subs=subs, vals=v, shape=np.array(shape),
                 **{f"f{m}": f for m, f in enumerate(factors)})
        init = tmp / f"{name}-{loss}-init"
        write_init(init, factors)
        a = dict(npz=str(npz), rank=args.rank, loss=loss, epochs=args.epochs,
                 epoch_iters=args.epoch_iters, rate=args.rate, seed=args.seed,
                 f_nz=f_nz, f_z=f_z, g_nz=g_nz, g_z=g_z)
        g_runs, s_runs = [], []
        for k in range(args.repeats):
            if loss != "poisson-log":  # GenTen's pip build has no log-link Poisson
                g_runs.append(run_genten(dict(a, model=str(tmp / f"{name}-{loss}-genten-{k}.npz")),
                                         args.threads))
            r = run_sptmc(exe, tns, init, dict(a, loss=sp_loss), args.threads,
                          out_dir=tmp / f"{name}-{loss}-sptmc-{k}")
            s_runs.append((r[0], r[1], r[2], r[4]))
        g = min(g_runs, key=lambda r: r[1]) if g_runs else None
        s_ = min(s_runs, key=lambda r: r[1])

        def full(model):
            return full_loss(sp_loss, subs, v, shape, model, args.dense_cells, args.zero_draws)

        g_full, how = full(g[3]) if g else (None, None)
        s_full, how = full(s_[3])
        rows.append(dict(tensor=name, loss=sp_loss, samples=f"{g_nz}+{g_z} / {f_nz}+{f_z}",
                         genten_loss=g[0] if g else None, genten_spe=g[1] if g else None,
                         sptmc_loss=s_[0], sptmc_spe=s_[1],
                         genten_full=g_full, sptmc_full=s_full, full_how=how,
                         all_genten=[round(r[1], 3) for r in g_runs],
                         all_sptmc=[round(r[1], 3) for r in s_runs]))
        print({k: v for k, v in rows[-1].items()}, flush=True)
    return rows


def opt_rows(exe, name, subs, vals, shape, args, tmp: Path):
    import pyttb as ttb
    from pyttb.gcp.handles import Objectives
    from pyttb.gcp.optimizers import LBFGSB

    rows = []
    for loss, obj, transform in [("gaussian", Objectives.GAUSSIAN, None),
                                 ("poisson", Objectives.POISSON, "counts"),
                                 ("bernoulli-odds", Objectives.BERNOULLI_ODDS, "binary")]:
        v = np.ones_like(vals) if transform == "binary" else vals
        if transform == "counts" and not np.all((v >= 0) & (v == np.round(v))):
            continue
        rng = np.random.default_rng(args.seed)
        k0 = ttb.ktensor([rng.random((d, args.opt_rank)) for d in shape])
        full = np.zeros(shape)
        full[tuple(subs.T)] = v
        X = ttb.tensor(full)
        k0 *= X.norm() / k0.norm()
        k0.normalize("all")
        factors = [np.array(f) * w for f, w in
                   zip(k0.factor_matrices, [k0.weights ** (1.0 / len(shape))] * len(shape))]
        init = tmp / f"opt-{name}-{loss}-init"
        write_init(init, factors)
        tns = tmp / f"opt-{name}-{loss}.tns"
        write_tns(tns, subs, v)
        start = time.perf_counter()
        M, _, info = ttb.gcp_opt(X, args.opt_rank, objective=obj, optimizer=LBFGSB(),
                                 init=ttb.ktensor([f.copy() for f in factors]), printitn=0)
        t_pyttb = time.perf_counter() - start
        f_pyttb = float(info["final_f"])
        f_sp, _, t_sp, j, _ = run_sptmc(exe, tns, init, dict(rank=args.opt_rank, loss=loss),
                                     args.threads, method="lbfgs")
        rows.append(dict(tensor=name, loss=loss, shape=shape, nnz=len(v),
                         pyttb_loss=f_pyttb, pyttb_iters=int(info.get("nit", -1)),
                         pyttb_s=t_pyttb, sptmc_loss=f_sp, sptmc_iters=len(j["iterations"]),
                         sptmc_s=t_sp, rel=abs(f_sp - f_pyttb) / abs(f_pyttb)))
        print(rows[-1], flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sptmc", default="target/release/sptmc")
    p.add_argument("--data", default=os.environ.get("SPTMC_DATA_DIR", "../shared/data"))
    p.add_argument("--tensors", default="movielens-100k,movielens-latest-small-4d,"
                   "movielens-10m-tags-4d,atp-matches-4d,uboot-commitwords-3d,generated",
                   help="shared tensors by name, \"generated\", or paths of .tns(.gz) files")
    p.add_argument("--gen", default="/work/shared/tools/gen_tensor.py")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--epoch-iters", type=int, default=1000)
    p.add_argument("--rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--opt-rank", type=int, default=4)
    p.add_argument("--losses", default="gaussian,bernoulli-odds,poisson,poisson-log",
                   help="the SGD rows' losses")
    p.add_argument("--balance-start", action="store_true",
                   help="hand both sides a start already balanced as GenTen balances it")
    p.add_argument("--dense-cells", type=float, default=2e9,
                   help="the most cells the full loss sums over densely")
    p.add_argument("--zero-draws", type=int, default=10_000_000,
                   help="zero cells drawn for the full loss beyond --dense-cells")
    p.add_argument("--skip-sgd", action="store_true")
    p.add_argument("--skip-opt", action="store_true")
    p.add_argument("--out")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-gcp-"))
    sgd, opt = [], []
    for name in args.tensors.split(","):
        if name == "generated":
            path = tmp / "generated.tns"
            gen = subprocess.run([sys.executable, args.gen, "powerlaw", str(path),
                                  "--dims", "20000,10000,500", "--nnz", "1000000",
                                  "--seed", "7"], capture_output=True, text=True)
            if gen.returncode != 0 or not path.exists():
                print(f"generated tensor skipped: {gen.stderr.strip()[:200]}", flush=True)
                continue
        elif Path(name).is_file():
            # A tensor file of one's own (.tns or .tns.gz), named by its stem.
            path = Path(name)
            name = path.name.split(".")[0]
        else:
            path = Path(args.data) / f"{name}.tns.gz"
        subs, vals, shape = read_tns(path)
        if not args.skip_sgd:
            sgd += sgd_rows(args.sptmc, name, subs, vals, shape, args, tmp)
        if not args.skip_opt and name in ("movielens-100k", "movielens-latest-small-4d"):
            # A slice small enough for pyttb's dense gradient.
            limits = (120, 200, 31) if len(shape) == 3 else (60, 120, 23, 24)
            keep = np.all(subs < np.array(limits), axis=1)
            opt += opt_rows(args.sptmc, name + "-slice", subs[keep], vals[keep],
                            tuple(min(a, b) for a, b in zip(limits, shape)), args, tmp)
    lines = []
    if sgd:
        lines += ["| tensor | loss | grad / value samples (nz+z) | GenTen f-est | sptmc f-est "
                  "| est. diff | GenTen full F | sptmc full F | full diff | zeros summed "
                  "| GenTen s/epoch | sptmc s/epoch | all runs (GenTen; sptmc) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

        def rel(a, b):
            return f"{(b - a) / abs(a) * 100:+.2f}%" if a is not None else "—"

        def num(x, fmt):
            return format(x, fmt) if x is not None else "—"

        for r in sgd:
            lines.append(f"| {r['tensor']} | {r['loss']} | {r['samples']} | "
                         f"{num(r['genten_loss'], '.6e')} | {r['sptmc_loss']:.6e} | "
                         f"{rel(r['genten_loss'], r['sptmc_loss'])} | "
                         f"{num(r['genten_full'], '.6e')} | {r['sptmc_full']:.6e} | "
                         f"{rel(r['genten_full'], r['sptmc_full'])} | {r['full_how']} | "
                         f"{num(r['genten_spe'], '.3f')} | {r['sptmc_spe']:.3f} | "
                         f"{r['all_genten']}; {r['all_sptmc']} |")
    if opt:
        lines += ["", "| slice | loss | shape | nnz | pyttb final F | sptmc final F | rel. diff "
                  "| pyttb its / s | sptmc its / s |", "|---|---|---|---|---|---|---|---|---|"]
        for r in opt:
            lines.append(f"| {r['tensor']} | {r['loss']} | {r['shape']} | {r['nnz']} | "
                         f"{r['pyttb_loss']:.10e} | {r['sptmc_loss']:.10e} | {r['rel']:.2e} | "
                         f"{r['pyttb_iters']} / {r['pyttb_s']:.1f} | "
                         f"{r['sptmc_iters']} / {r['sptmc_s']:.1f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
