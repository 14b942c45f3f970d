#!/usr/bin/env python3
"""CP-ALS from Python: ``sptmc.cp_als`` beside ``pyttb.cp_als``, and beside ``sptmc cp``.

Two comparisons per tensor, in one run on one machine, the sides alternating for
``--rounds`` rounds (each side's median over rounds is reported; every run is kept in
results.json):

1. **sptmc vs pyttb**: both from the same initial factors (drawn here, rounded to f32,
   handed to both), the same rank and the same number of iterations, ``tol=0``. Time
   per iteration is each call's wall clock over its iterations (sptmc's tensor is
   prepared beforehand, as pyttb's ``sptensor`` is built beforehand; neither side's
   file read is timed). The final fits are shown side by side.
2. **Python overhead**: ``sptmc.cp_als(X, R, seed=S)`` against
   ``sptmc cp FILE --rank R --seed S --json`` (same seed, so the very same
   computation; the fits must agree). The CLI's ``seconds_per_iter`` times its CP-ALS
   loop without the file read or the HLS build; the Python side's time is the whole
   ``cp_als`` call on an already prepared tensor (argument checks and conversions,
   the run, the result arrays) over its iterations. Overhead = Python / CLI - 1.
   Also reported: the same calls' wall clock over the seconds of their iterations
   (``result.seconds``): the Python layer plus ``cp_als``'s own setup (initial
   factors, memory plan; the CLI's figure includes that setup too), in one process.

Every side runs with ``--threads`` threads (the rayon pool on ours;
``OMP/OPENBLAS/MKL_NUM_THREADS`` for numpy under pyttb, set before numpy loads).
Refuses a debug build of the extension and a CLI binary that is missing.

Writes ``OUT/results.json`` and ``OUT/README.md`` (date, machine, commit, load,
command, table) and prints the table.

    python python/bench/compare_pyttb.py --out bench/results/$(date -u +%F)-python-cp-als
    python python/bench/compare_pyttb.py movielens-100k.tns.gz --rounds 1 --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SHARED = [
    "movielens-100k.tns.gz",
    "movielens-latest-small-4d.tns.gz",
    "movielens-10m-tags-4d.tns.gz",
    "atp-matches-4d.tns.gz",
    "uboot-commitwords-3d.tns.gz",
]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "tensors",
        nargs="*",
        help="file names under --data-dir, or paths (default: the five shared tensors)",
    )
    ap.add_argument(
        "--data-dir",
        default=os.environ.get("SPTMC_DATA_DIR", str(REPO.parent / "shared" / "data")),
    )
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument(
        "--iters",
        type=int,
        default=20,
        help="iterations of both sides in the pyttb comparison",
    )
    ap.add_argument(
        "--overhead-iters",
        type=int,
        default=200,
        help="iterations of the Python-vs-CLI runs (long enough to time precisely)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--cli",
        help="the sptmc binary (default: $CARGO_TARGET_DIR/release/sptmc, else "
        "target/release/sptmc)",
    )
    ap.add_argument("--no-pyttb", action="store_true", help="only the overhead comparison")
    ap.add_argument("--out", help="folder for results.json and README.md")
    return ap.parse_args()


ARGS = parse_args()
# Before numpy is imported: its BLAS reads these once.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402

import sptmc  # noqa: E402


def cli_binary() -> Path:
    if ARGS.cli:
        path = Path(ARGS.cli)
    else:
        target = os.environ.get("CARGO_TARGET_DIR") or str(REPO / "target")
        path = Path(target) / "release" / "sptmc"
    if not os.access(path, os.X_OK):
        sys.exit(f"{path}: no sptmc binary there; build it (cargo build --release) or pass --cli")
    return path


def tensor_path(name: str) -> Path:
    p = Path(name)
    if not p.is_file():
        p = Path(ARGS.data_dir) / name
    if not p.is_file():
        sys.exit(f"{name}: not found (looked in {ARGS.data_dir}; set --data-dir)")
    return p


def run_cli(binary: Path, path: Path, iters: int) -> dict:
    cmd = [
        str(binary), "cp", str(path), "--rank", str(ARGS.rank), "--iters", str(iters),
        "--tol", "0", "--seed", str(ARGS.seed), "--backend", "cpu",
        "--threads", str(ARGS.threads), "--json",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return {
        "seconds_per_iter": r["seconds_per_iter"],
        "fit": r["final_fit"],
        "iterations": len(r["iterations"]),
    }


def run_ours(X: sptmc.Tensor, iters: int, **kw) -> dict:
    t = time.perf_counter()
    m = sptmc.cp_als(X, ARGS.rank, iters=iters, tol=0, backend="cpu", threads=ARGS.threads, **kw)
    wall = time.perf_counter() - t
    return {
        "seconds_per_iter": wall / m.iterations,
        "engine_seconds_per_iter": float(m.seconds.sum()) / m.iterations,
        "fit": m.fit,
        "iterations": m.iterations,
    }


def run_pyttb(ttb, Y, init: list) -> dict:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        t = time.perf_counter()
        _, _, out = ttb.cp_als(
            Y, ARGS.rank, stoptol=0.0, maxiters=ARGS.iters, init=ttb.ktensor(init), printitn=0
        )
        wall = time.perf_counter() - t
    return {"seconds_per_iter": wall / ARGS.iters, "fit": float(out["fit"])}


def median(runs: list, key: str = "seconds_per_iter") -> float:
    return statistics.median(r[key] for r in runs)


def bench_tensor(binary: Path, name: str, ttb) -> dict:
    path = tensor_path(name)
    run_cli(binary, path, 1)  # the binary cache written, the file in the page cache
    X = sptmc.read(path)
    sptmc.cp_als(X, ARGS.rank, iters=1, tol=0, backend="cpu", threads=ARGS.threads)  # HLS form
    rng = np.random.default_rng(ARGS.seed)
    init = [rng.random((d, ARGS.rank)).astype(np.float32).astype(np.float64) for d in X.shape]
    Y = None if ttb is None else X.to_pyttb()
    rec: dict = {"tensor": path.name, "shape": list(X.shape), "nnz": X.nnz,
                 "cli": [], "python": [], "sptmc_init": [], "pyttb": []}
    for _ in range(ARGS.rounds):
        rec["cli"].append(run_cli(binary, path, ARGS.overhead_iters))
        rec["python"].append(run_ours(X, ARGS.overhead_iters, seed=ARGS.seed))
        if ttb is not None:
            rec["sptmc_init"].append(run_ours(X, ARGS.iters, init=init))
            rec["pyttb"].append(run_pyttb(ttb, Y, init))
    cli, py = median(rec["cli"]), median(rec["python"])
    rec["summary"] = {
        "cli_s_per_iter": cli,
        "python_s_per_iter": py,
        "python_overhead_pct": 100.0 * (py / cli - 1.0),
        # The same Python calls against the seconds of their iterations: what the
        # Python layer and cp_als's own setup (initial factors, memory plan; also in
        # the CLI's figure) add, inside one process.
        "wrapper_overhead_pct": 100.0 * (py / median(rec["python"], "engine_seconds_per_iter") - 1.0),
        "same_fit_as_cli": rec["cli"][0]["fit"] == rec["python"][0]["fit"],
        "cli_fit": rec["cli"][0]["fit"],
        "python_fit": rec["python"][0]["fit"],
    }
    if ttb is not None:
        ours, theirs = median(rec["sptmc_init"]), median(rec["pyttb"])
        rec["summary"].update({
            "sptmc_s_per_iter": ours,
            "pyttb_s_per_iter": theirs,
            "pyttb_over_sptmc": theirs / ours,
            "sptmc_fit": rec["sptmc_init"][0]["fit"],
            "pyttb_fit": rec["pyttb"][0]["fit"],
        })
    return rec


def row(rec: dict, with_pyttb: bool) -> str:
    s = rec["summary"]
    cells = [rec["tensor"], f"{rec['nnz']:,}"]
    if with_pyttb:
        cells += [
            f"{s['sptmc_s_per_iter']:.4f}", f"{s['pyttb_s_per_iter']:.3f}",
            f"{s['pyttb_over_sptmc']:.0f}×", f"{s['sptmc_fit']:.6f} / {s['pyttb_fit']:.6f}",
        ]
    cells += [
        f"{s['cli_s_per_iter']:.5f}", f"{s['python_s_per_iter']:.5f}",
        f"{s['python_overhead_pct']:+.1f} %", f"{s['wrapper_overhead_pct']:+.1f} %",
        "yes" if s["same_fit_as_cli"] else "NO",
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    if sptmc._sptmc.DEBUG_BUILD:
        sys.exit(
            f"{sptmc._sptmc.__file__} is a debug build: install a release one "
            "(pip install ./python, or maturin develop --release)"
        )
    binary = cli_binary()
    ttb: Any = None
    if not ARGS.no_pyttb:
        import pyttb

        ttb = pyttb
    names = ARGS.tensors or SHARED
    load_before = os.getloadavg()
    records = []
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        records.append(bench_tensor(binary, name, ttb))
    load_after = os.getloadavg()

    with_pyttb = ttb is not None
    head = ["tensor", "nnz"]
    if with_pyttb:
        head += ["sptmc.cp_als s/iter", "pyttb.cp_als s/iter", "pyttb/sptmc",
                 f"fit after {ARGS.iters} it (sptmc / pyttb)"]
    head += ["`sptmc cp` s/iter", "sptmc.cp_als s/iter (same run)", "Python overhead",
             "call over its iterations", "same fit"]
    table = "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        + [row(r, with_pyttb) for r in records]
    )
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    readme = f"""# CP-ALS rank {ARGS.rank} from Python: sptmc.cp_als vs pyttb.cp_als, and vs `sptmc cp`

- Date (UTC): {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}
- Machine: {cpu}, {os.cpu_count()} cores; {ARGS.threads} threads on every side
- Commit: {commit}; sptmc {sptmc.__version__} ({sptmc._sptmc.__file__}); CLI {binary}
- Load average before: {' '.join(f'{x:.2f}' for x in load_before)}; after: {' '.join(f'{x:.2f}' for x in load_after)}
- Command: `{command}`

Rounds: {ARGS.rounds}, the sides alternating; each cell is the median over rounds.
sptmc vs pyttb: the same initial factors, {ARGS.iters} iterations each, `tol=0`; wall
clock of each `cp_als` call over its iterations (tensors prepared beforehand).
Python overhead: `sptmc.cp_als(X, {ARGS.rank}, iters={ARGS.overhead_iters}, tol=0,
seed={ARGS.seed})` on a prepared tensor, whole call, against the CLI's
`seconds_per_iter` of `sptmc cp FILE --rank {ARGS.rank} --iters {ARGS.overhead_iters}
--tol 0 --seed {ARGS.seed} --backend cpu --threads {ARGS.threads} --json` (its CP-ALS
loop); the two compute the same model ("same fit"). "Call over its iterations": the
same Python calls' wall clock against the seconds of their iterations
(`result.seconds`), i.e. what the Python layer and `cp_als`'s own setup (initial
factors, memory plan — in the CLI's figure too) add inside one process.

{table}
"""
    print(readme)
    if ARGS.out:
        out = Path(ARGS.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(records, indent=1) + "\n")
        (out / "README.md").write_text(readme)
        print(f"wrote {out}/README.md and results.json", file=sys.stderr)


if __name__ == "__main__":
    main()
