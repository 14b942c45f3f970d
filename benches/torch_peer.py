#!/usr/bin/env python3
"""PyTorch peer baseline for sptmc's GPU benchmarks: sparse MTTKRP and TTMc as a Python
user would write them with plain torch ops (gather rows, multiply, ``index_add_``).

This is a *peer* to compare against, not part of the product: sptmc does not use it.

What it measures, for every tensor and every mode n (fp32 on the chosen device):

- MTTKRP: ``out = zeros(I_n, R)``; ``prod = v[:, None] * Π_{m≠n} F_m[idx_m]`` (gathered
  factor rows); ``out.index_add_(0, idx_n, prod)``. One call, all nonzeros at once.
- TTMc (order ≥ 3): ``Y_(n)`` is ``I_n × Π_{m≠n} R_m``; per nonzero, v times the
  Kronecker (outer) product of the other modes' gathered factor rows, modes in
  increasing order with the later mode fastest (sptmc's column order), ``index_add_``
  into Y. Nonzeros go in chunks so the largest intermediate (chunk × Π R_m × 4 bytes)
  stays within ``--ttmc-chunk-bytes`` (1 GiB by default); the chunk is in the output.

Factors are ``torch.rand`` on the device, one fixed generator seed per mode. Each
measurement is one untimed warm-up then ``--reps`` timed calls (output allocation and
zeroing included; ``torch.cuda.synchronize()`` inside the timer on CUDA); median and
minimum are reported per mode, and their sums over the modes ("all").

Effective bandwidth = bytes that must move / median time, bytes =
  nnz × (4 × order + 4)                      (32-bit indices and value, read once)
  + Σ_{m≠n} touched_m × cols_m × 4           (factor rows the tensor touches, read once)
  + I_n × out_cols × 4                       (output written once)
(the same floor as ``sptmc bench``, with COO as the tensor's bytes). A device copy
rate (device-to-device ``copy_`` of a 1 GiB buffer on CUDA, 256 MiB on CPU; bytes read +
written / time) is measured too, to compare against.

Accuracy (always on): every result is compared with a float64 reference computed on the
CPU by the same formula in torch float64, on the whole output, or, when the tensor has
more than ``--check-nnz`` nonzeros, on a random subset of output rows (the reference for
those rows uses just the nonzeros whose mode-n index is in the subset). SMAPE =
100%/n Σ |x−y| / (|x|+|y|), both-zero terms count 0. The run fails (exit 1) when an
output holds NaN/Inf or SMAPE > ``--smape-max`` (0.1 %).

Input: FROSTT .tns, one nonzero per line, 1-based indices then the value, '#' comments;
gzip is detected by its magic bytes. Duplicate coordinates are summed (coalesce). Or a
generated uniform random tensor (``--gen-nnz``), made with torch on the device itself.

Usage:
  python3 benches/torch_peer.py FILE.tns[.gz] ... --rank 32 --ttmc-ranks 8 --reps 10 \\
      --device cuda --out results.json
  python3 benches/torch_peer.py --gen-nnz 50000000 --gen-seed 1 [--gen-dims 4096,4096,4096] \\
      --rank 32 --ttmc-ranks 8 --device cuda --out generated.json

stdout gets the table; progress goes to stderr; ``--out`` gets the full JSON (torch
version, device name, UTC date, command line, every repetition's time).
"""

import argparse
import datetime
import gzip
import json
import math
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

GiB = 1 << 30
BANDWIDTH_FORMULA = (
    "bytes = nnz*(4*order + 4) + sum_{m != n} touched_rows_m*cols_m*4 + I_n*out_cols*4; "
    "GB/s = bytes / median_s / 1e9 (cols_m = R for MTTKRP, R_m for TTMc; out_cols = R for "
    "MTTKRP, prod_{m != n} R_m for TTMc; touched_rows_m = distinct mode-m indices)"
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Input


def read_tns(path: Path):
    """Reads a FROSTT .tns (gzip by magic bytes). Returns (indices int64 order×nnz, 0-based,
    values float64, raw line count)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    table = None
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        try:
            import pandas as pd
        except ImportError:
            pd = None
        if pd is not None:
            with opener(path, "rb") as f:
                df = pd.read_csv(f, sep=r"\s+", header=None, comment="#", dtype=np.float64,
                                 engine="c")
            table = torch.from_numpy(np.ascontiguousarray(df.to_numpy(dtype=np.float64)))
        else:
            with opener(path, "rb") as f:
                text = f.read().decode("ascii")
            if "#" in text:
                text = "\n".join(ln.split("#", 1)[0] for ln in text.splitlines())
            ncols = _first_row_width(text)
            flat = np.fromstring(text, dtype=np.float64, sep=" ") if ncols else np.zeros(0)
            if ncols and flat.size % ncols:
                raise ValueError(f"{path}: {flat.size} numbers do not split into rows of {ncols}")
            table = torch.from_numpy(flat.reshape(-1, max(ncols, 1)))
    else:  # no numpy: plain Python, slow but dependency-free
        with opener(path, "rb") as f:
            text = f.read().decode("ascii")
        text = "\n".join(ln.split("#", 1)[0] for ln in text.splitlines())
        ncols = _first_row_width(text)
        flat = torch.tensor([float(t) for t in text.split()], dtype=torch.float64)
        if ncols and flat.numel() % ncols:
            raise ValueError(f"{path}: {flat.numel()} numbers do not split into rows of {ncols}")
        table = flat.reshape(-1, max(ncols, 1))
    if table.ndim != 2 or table.shape[0] == 0:
        raise ValueError(f"{path}: no nonzeros")
    if table.shape[1] < 3:
        raise ValueError(f"{path}: rows have {table.shape[1]} columns, need >= 2 indices + value")
    if torch.isnan(table).any():
        raise ValueError(f"{path}: ragged rows or unparsable numbers")
    sub = table[:, :-1]
    if (sub < 1).any() or (sub != sub.floor()).any():
        raise ValueError(f"{path}: indices must be integers >= 1")
    idx = (sub.to(torch.int64) - 1).t().contiguous()
    vals = table[:, -1].contiguous()
    return idx, vals, table.shape[0]


def _first_row_width(text: str) -> int:
    for ln in text.splitlines():
        toks = ln.split()
        if toks:
            return len(toks)
    return 0


def coalesce(idx: torch.Tensor, vals: torch.Tensor, dims):
    """Sums duplicate coordinates (sorted, mode 0 slowest)."""
    if math.prod(dims) < (1 << 62):
        try:
            c = torch.sparse_coo_tensor(idx, vals, tuple(dims), check_invariants=False)
        except TypeError:  # torch < 2.1
            c = torch.sparse_coo_tensor(idx, vals, tuple(dims))
        c = c.coalesce()
        return c.indices().contiguous(), c.values().contiguous()
    # The linearized index would overflow int64: unique over columns instead.
    uniq, inv = torch.unique(idx, dim=1, return_inverse=True)
    summed = torch.zeros(uniq.shape[1], dtype=vals.dtype, device=vals.device)
    summed.index_add_(0, inv, vals)
    return uniq.contiguous(), summed


class Tensor:
    """A coalesced sparse tensor on the device (int64 indices, fp32 values), and the
    float64 values for the reference when they came from a file."""

    def __init__(self, name, source, dims, idx, vals, vals64_cpu, nnz_raw, load_s):
        self.name, self.source, self.dims = name, source, list(dims)
        self.idx, self.vals, self.vals64_cpu = idx, vals, vals64_cpu
        self.nnz_raw, self.load_s = nnz_raw, load_s

    @property
    def order(self):
        return len(self.dims)

    @property
    def nnz(self):
        return self.vals.numel()


def load_file(path: Path, device) -> Tensor:
    t0 = time.perf_counter()
    idx, vals, nnz_raw = read_tns(path)
    dims = [int(d) + 1 for d in idx.max(dim=1).values.tolist()]
    idx, vals64 = coalesce(idx, vals, dims)
    t = Tensor(case_name(path), str(path), dims, idx.to(device), vals64.to(device, torch.float32),
               vals64, nnz_raw, 0.0)
    sync(device)
    t.load_s = time.perf_counter() - t0
    return t


def generate(nnz: int, dims, seed: int, device) -> Tensor:
    t0 = time.perf_counter()
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    idx = torch.stack([torch.randint(0, d, (nnz,), generator=g, device=device, dtype=torch.int64)
                       for d in dims])
    vals = 1.0 - torch.rand(nnz, generator=g, device=device, dtype=torch.float32)  # (0, 1]
    idx, vals = coalesce(idx, vals, dims)
    sync(device)
    name = f"uniform-{'x'.join(map(str, dims))}-nnz{nnz}-seed{seed}"
    return Tensor(name, "generated", dims, idx, vals, None, nnz, time.perf_counter() - t0)


def case_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".tns"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


# ---------------------------------------------------------------------------------------
# The operations (the same code computes the fp32 result on the device and the float64
# reference on the CPU)


def mttkrp(idx, vals, factors, n, rows):
    R = factors[(n + 1) % len(factors)].shape[1]
    out = torch.zeros(rows, R, dtype=vals.dtype, device=vals.device)
    prod = None
    for m, F in enumerate(factors):
        if m == n:
            continue
        g = F[idx[m]]
        prod = g if prod is None else prod.mul_(g)
    prod.mul_(vals[:, None])
    out.index_add_(0, idx[n], prod)
    return out


def kron_rows(idx, vals, factors, n, s, e):
    """v[s:e] times the row-wise Kronecker product of the other modes' gathered rows
    (modes in increasing order, later mode fastest)."""
    acc = None
    for m, F in enumerate(factors):
        if m == n:
            continue
        g = F[idx[m][s:e]]
        if acc is None:
            acc = g * vals[s:e, None]
        else:
            acc = (acc[:, :, None] * g[:, None, :]).reshape(acc.shape[0], -1)
    return acc


def ttmc(idx, vals, factors, n, rows, chunk):
    cols = math.prod(F.shape[1] for m, F in enumerate(factors) if m != n)
    out = torch.zeros(rows, cols, dtype=vals.dtype, device=vals.device)
    nnz = vals.numel()
    for s in range(0, nnz, chunk):
        e = min(s + chunk, nnz)
        out.index_add_(0, idx[n][s:e], kron_rows(idx, vals, factors, n, s, e))
    return out


def ttmc_chunk(factors, n, budget_bytes, elem_bytes=4):
    cols = math.prod(F.shape[1] for m, F in enumerate(factors) if m != n)
    return max(1, budget_bytes // (cols * elem_bytes)), cols


def mttkrp_ref(idx, vals, factors, n, rows, budget_bytes):
    """float64 MTTKRP, in chunks of nonzeros so host memory stays bounded."""
    R = factors[(n + 1) % len(factors)].shape[1]
    out = torch.zeros(rows, R, dtype=torch.float64)
    chunk = max(1, budget_bytes // (R * 8))
    for s in range(0, vals.numel(), chunk):
        e = min(s + chunk, vals.numel())
        sub = [i[s:e] for i in idx]
        out += mttkrp(sub, vals[s:e], factors, n, rows)
    return out


# ---------------------------------------------------------------------------------------
# Timing and checks


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_op(fn, reps, device):
    """One untimed warm-up, then `reps` timed calls; returns (times, last result)."""
    out = fn()
    sync(device)
    times = []
    for _ in range(reps):
        del out
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return times, out


def copy_rate(device, nbytes, reps):
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(device)
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    del src, dst
    return {
        "buffer_bytes": n * 4,
        "bytes_moved": 2 * n * 4,
        "formula": "2 * buffer_bytes (read + written) / median_s / 1e9",
        "median_s": med,
        "min_s": min(times),
        "gb_per_s": 2 * n * 4 / med / 1e9,
        "gb_per_s_best": 2 * n * 4 / min(times) / 1e9,
        "times_s": times,
    }


def smape_percent(x: torch.Tensor, y: torch.Tensor) -> float:
    if x.numel() == 0:
        return 0.0
    d = (x - y).abs()
    s = x.abs() + y.abs()
    t = torch.where(s > 0, d / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(s))
    return float(100.0 * t.sum() / t.numel())


def check_rows(t: Tensor, n: int, check_nnz: int, gen: torch.Generator):
    """Which output rows of mode n to check, and the nonzeros (on the CPU, float64 values)
    whose mode-n index falls in them. All rows when the tensor is small enough."""
    rows = t.dims[n]
    if t.nnz <= check_nnz:
        sel_rows = None
        idx = t.idx.cpu()
        vals = t.vals64_cpu if t.vals64_cpu is not None else t.vals.double().cpu()
    else:
        k = min(rows, max(1, math.ceil(rows * check_nnz / t.nnz)))
        sel_rows = torch.randperm(rows, generator=gen)[:k].sort().values
        mask = torch.zeros(rows, dtype=torch.bool, device=t.idx.device)
        mask[sel_rows.to(t.idx.device)] = True
        sel = mask[t.idx[n]]
        idx = t.idx[:, sel].cpu()
        if t.vals64_cpu is not None:
            vals = t.vals64_cpu[sel.cpu()]
        else:
            vals = t.vals[sel].double().cpu()
    return sel_rows, idx, vals


def compare(out: torch.Tensor, ref: torch.Tensor, sel_rows, smape_max):
    finite = bool(torch.isfinite(out).all())
    got = out.double().cpu() if sel_rows is None else out[sel_rows.to(out.device)].double().cpu()
    want = ref if sel_rows is None else ref[sel_rows]
    sm = smape_percent(got, want)
    diff = (got - want)
    norm = float(torch.linalg.vector_norm(want))
    rel_fro = float(torch.linalg.vector_norm(diff)) / norm if norm > 0 else float(
        torch.linalg.vector_norm(diff))
    ok = finite and math.isfinite(sm) and sm <= smape_max
    return {
        "finite": finite,
        "smape_percent": sm,
        "rel_frobenius": rel_fro,
        "max_abs_err": float(diff.abs().max()) if diff.numel() else 0.0,
        "rows_checked": out.shape[0] if sel_rows is None else int(sel_rows.numel()),
        "entries_checked": int(got.numel()),
        "pass": ok,
    }


def touched_rows(t: Tensor):
    return [int(torch.bincount(t.idx[m], minlength=t.dims[m]).count_nonzero())
            for m in range(t.order)]


def make_factors(dims, cols, seed, device):
    fs = []
    for m, (d, r) in enumerate(zip(dims, cols)):
        g = torch.Generator(device=device)
        g.manual_seed(seed + m)
        fs.append(torch.rand(d, r, generator=g, device=device, dtype=torch.float32))
    return fs


def run_tensor(t: Tensor, args, device):
    """All ops and modes on one tensor; returns its JSON record."""
    rec = {
        "name": t.name, "source": t.source, "dims": t.dims, "order": t.order, "nnz": t.nnz,
        "nnz_before_coalesce": t.nnz_raw, "duplicates_summed": t.nnz_raw - t.nnz,
        "load_s": t.load_s, "results": [], "notes": [],
    }
    touched = touched_rows(t)
    rec["touched_rows"] = touched
    coo_bytes = t.nnz * (4 * t.order + 4)
    gen = torch.Generator()
    gen.manual_seed(args.check_seed)

    ops = [("mttkrp", [args.rank] * t.order)]
    if t.order >= 3:
        tr = args.ttmc_ranks
        if len(tr) == 1:
            tr = tr * t.order
        if len(tr) != t.order:
            raise ValueError(f"--ttmc-ranks has {len(tr)} values, tensor has order {t.order}")
        ops.append(("ttmc", tr))
    else:
        rec["notes"].append("ttmc skipped: order < 3")

    for op, cols in ops:
        factors = make_factors(t.dims, cols, args.factor_seed + (0 if op == "mttkrp" else 500),
                               device)
        factors64 = [F.double().cpu() for F in factors]
        op_rows = []
        for n in range(t.order):
            rows = t.dims[n]
            if op == "mttkrp":
                out_cols = cols[n]
                chunk = None
                fn = lambda n=n: mttkrp(t.idx, t.vals, factors, n, rows)
                rank_label = str(cols[n])
            else:
                chunk, out_cols = ttmc_chunk(factors, n, args.ttmc_chunk_bytes)
                if rows * out_cols > args.max_ttmc_output:
                    note = (f"ttmc mode {n} skipped: output {rows}x{out_cols} is over the cap of "
                            f"{args.max_ttmc_output} floats")
                    rec["notes"].append(note)
                    log(f"{t.name}: {note}")
                    continue
                fn = lambda n=n, chunk=chunk: ttmc(t.idx, t.vals, factors, n, rows, chunk)
                rank_label = "x".join(str(c) for m, c in enumerate(cols) if m != n)
            row = {"op": op, "mode": n, "rank": rank_label, "output": [rows, out_cols]}
            if chunk is not None:
                row["chunk_nnz"] = chunk
                row["chunks"] = math.ceil(t.nnz / chunk)
            try:
                times, out = time_op(fn, args.reps, device)
            except (RuntimeError, MemoryError) as e:  # torch.OutOfMemoryError is a RuntimeError
                row.update({"error": f"{type(e).__name__}: {e}".splitlines()[0], "pass": False})
                rec["results"].append(row)
                log(f"{t.name}: {op} mode {n}: FAILED: {row['error']}")
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            med, mn = statistics.median(times), min(times)
            fbytes = sum(touched[m] * cols[m] * 4 for m in range(t.order) if m != n)
            bytes_moved = coo_bytes + fbytes + rows * out_cols * 4
            row.update({
                "median_s": med, "min_s": mn, "times_s": times,
                "nnz_per_s": t.nnz / med, "bytes_moved": bytes_moved,
                "gb_per_s": bytes_moved / med / 1e9,
            })
            # Accuracy against float64 on the CPU.
            sel_rows, ridx, rvals = check_rows(t, n, args.check_nnz, gen)
            if op == "mttkrp":
                ref = mttkrp_ref(ridx, rvals, factors64, n, rows, args.ref_chunk_bytes)
            else:
                rchunk, _ = ttmc_chunk(factors64, n, args.ref_chunk_bytes, elem_bytes=8)
                ref = ttmc(ridx, rvals, factors64, n, rows, rchunk)
            row["check"] = compare(out, ref, sel_rows, args.smape_max)
            row["check"]["nnz_in_reference"] = int(rvals.numel())
            row["pass"] = row["check"]["pass"]
            del out, ref, ridx, rvals
            rec["results"].append(row)
            op_rows.append(row)
            log(f"{t.name}: {op} r{rank_label} mode {n}: median {med * 1e3:.3f} ms "
                f"(min {mn * 1e3:.3f} ms), {bytes_moved / med / 1e9:.1f} GB/s, "
                f"SMAPE {row['check']['smape_percent']:.2e}% "
                f"({'ok' if row['pass'] else 'FAIL'})")
        if op_rows:
            med = sum(r["median_s"] for r in op_rows)
            mn = sum(r["min_s"] for r in op_rows)
            b = sum(r["bytes_moved"] for r in op_rows)
            rec["results"].append({
                "op": op, "mode": "all", "rank": op_rows[0]["rank"] if op == "mttkrp" else
                "x".join(map(str, cols)), "median_s": med, "min_s": mn,
                "nnz_per_s": t.nnz * len(op_rows) / med, "bytes_moved": b, "gb_per_s": b / med / 1e9,
                "modes_summed": [r["mode"] for r in op_rows],
                "smape_percent_max": max(r["check"]["smape_percent"] for r in op_rows),
                "pass": all(r["pass"] for r in op_rows),
            })
        del factors, factors64
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rec


# ---------------------------------------------------------------------------------------
# Output


def table(records, copy):
    hdr = ["tensor", "op", "mode", "rank", "median s", "min s", "nnz/s", "GB/s", "SMAPE %"]
    lines = []
    for rec in records:
        if "error" in rec:
            lines.append([rec["name"], "-", "-", "-", "-", "-", "-", "-", "ERROR"])
            continue
        for r in rec["results"]:
            if "error" in r:
                lines.append([rec["name"], r["op"], str(r["mode"]), r["rank"], "-", "-", "-", "-",
                              "ERROR"])
                continue
            sm = r["check"]["smape_percent"] if "check" in r else r["smape_percent_max"]
            lines.append([
                rec["name"], r["op"], str(r["mode"]), str(r["rank"]), f"{r['median_s']:.6f}",
                f"{r['min_s']:.6f}", f"{r['nnz_per_s']:.3e}", f"{r['gb_per_s']:.2f}",
                f"{sm:.2e}" + ("" if r["pass"] else " FAIL"),
            ])
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
              for i, h in enumerate(hdr)]
    out = ["  ".join(h.ljust(w) if i < 4 else h.rjust(w) for i, (h, w) in enumerate(zip(hdr, widths)))]
    for l in lines:
        out.append("  ".join(c.ljust(w) if i < 4 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(l, widths))))
    out.append("")
    out.append(f"device copy rate: {copy['gb_per_s']:.1f} GB/s (median; best "
               f"{copy['gb_per_s_best']:.1f}) over a {copy['buffer_bytes'] / GiB:.2f} GiB buffer, "
               "bytes read + written")
    out.append("mode 'all' = sums of the per-mode median / min times; SMAPE for 'all' is the "
               "largest of the modes'")
    out.append("GB/s: " + BANDWIDTH_FORMULA)
    out.append("TTMc runs in chunks of nonzeros (chunk x prod R_m x 4 bytes <= the chunk budget); "
               "chunk sizes are in the JSON")
    for rec in records:
        for note in rec.get("notes", []):
            out.append(f"note: {rec['name']}: {note}")
        if "error" in rec:
            out.append(f"error: {rec['name']}: {rec['error']}")
    return "\n".join(out)


def device_info(device):
    info = {"device": str(device), "torch": torch.__version__, "python": platform.python_version()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update({
            "device_name": torch.cuda.get_device_name(device),
            "cuda": torch.version.cuda,
            "device_memory_bytes": p.total_memory,
            "multiprocessors": p.multi_processor_count,
        })
    else:
        name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                for ln in f:
                    if ln.startswith("model name"):
                        name = ln.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        info.update({"device_name": name, "torch_threads": torch.get_num_threads()})
    return info


def parse_ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(
        description="PyTorch peer baseline: sparse MTTKRP and TTMc (gather + index_add_).",
        epilog="See the docstring at the top of this file for what is measured.")
    ap.add_argument("files", nargs="*", type=Path, help="FROSTT .tns or .tns.gz files")
    ap.add_argument("--rank", type=int, default=32, help="MTTKRP rank (default 32)")
    ap.add_argument("--ttmc-ranks", type=parse_ints, default=[8],
                    help="TTMc ranks: one for every mode, or a comma list per mode (default 8)")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions (default 10)")
    ap.add_argument("--device", choices=["cuda", "cpu", "auto"], default="auto")
    ap.add_argument("--out", type=Path, help="write the full JSON here")
    ap.add_argument("--gen-nnz", type=int, help="generate a uniform random tensor of N nonzeros "
                    "(before duplicates are summed) on the device")
    ap.add_argument("--gen-seed", type=int, default=1)
    ap.add_argument("--gen-dims", type=parse_ints, default=[4096, 4096, 4096],
                    help="dims of the generated tensor (default 4096,4096,4096)")
    ap.add_argument("--factor-seed", type=int, default=1,
                    help="factor m uses seed factor_seed + m (TTMc: + 500 + m)")
    ap.add_argument("--ttmc-chunk-bytes", type=int, default=GiB,
                    help="TTMc chunk budget: chunk x prod R_m x 4 bytes <= this (default 1 GiB)")
    ap.add_argument("--max-ttmc-output", type=int, default=256 << 20,
                    help="skip a TTMc mode whose output has more floats (default 2^28)")
    ap.add_argument("--check-nnz", type=int, default=4_000_000,
                    help="check whole outputs up to this many nonzeros, else a random subset of "
                    "rows holding about this many (default 4e6)")
    ap.add_argument("--check-seed", type=int, default=7)
    ap.add_argument("--ref-chunk-bytes", type=int, default=256 << 20,
                    help="chunk budget of the float64 CPU reference (default 256 MiB)")
    ap.add_argument("--smape-max", type=float, default=0.1, help="fail above this SMAPE %% (0.1)")
    ap.add_argument("--copy-bytes", type=int,
                    help="device copy buffer (default 1 GiB on CUDA, 256 MiB on CPU)")
    args = ap.parse_args()

    if not args.files and not args.gen_nnz:
        ap.error("give .tns files or --gen-nnz")
    if args.gen_nnz and (len(args.gen_dims) < 2 or min(args.gen_dims) < 1):
        ap.error("--gen-dims needs at least two positive dims")
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            log("--device cuda but torch.cuda.is_available() is False")
            return 1
        device = torch.device("cuda", torch.cuda.current_device())
    torch.set_grad_enabled(False)

    info = device_info(device)
    log(f"torch {info['torch']} on {info['device_name']} ({device})")
    copy = copy_rate(device, args.copy_bytes or (GiB if device.type == "cuda" else 256 << 20),
                     max(args.reps, 5))
    log(f"device copy rate: {copy['gb_per_s']:.1f} GB/s")

    records = []
    failed = False
    sources = [("file", p) for p in args.files]
    if args.gen_nnz:
        sources.append(("gen", None))
    for kind, p in sources:
        try:
            if kind == "file":
                log(f"reading {p}")
                t = load_file(p, device)
            else:
                log(f"generating {args.gen_nnz} nonzeros, dims {args.gen_dims}, seed {args.gen_seed}")
                t = generate(args.gen_nnz, args.gen_dims, args.gen_seed, device)
            log(f"{t.name}: dims {t.dims}, nnz {t.nnz} ({t.nnz_raw - t.nnz} duplicates summed), "
                f"loaded in {t.load_s:.2f} s")
            rec = run_tensor(t, args, device)
            del t
            if device.type == "cuda":
                torch.cuda.empty_cache()
        except Exception as e:  # keep going with the other tensors, but fail the run
            name = case_name(p) if p is not None else "generated"
            rec = {"name": name, "source": str(p) if p else "generated",
                   "error": f"{type(e).__name__}: {e}"}
            log(f"{name}: ERROR {rec['error']}")
        if "error" in rec or not all(r.get("pass", False) for r in rec["results"]):
            failed = True
        records.append(rec)

    doc = {
        "tool": "benches/torch_peer.py (PyTorch peer baseline; not part of sptmc)",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
        "host": platform.node(),
        **info,
        "settings": {
            "rank": args.rank, "ttmc_ranks": args.ttmc_ranks, "reps": args.reps,
            "warmup": 1, "factor_seed": args.factor_seed,
            "factors": "torch.rand(I_m, R_m) on the device, generator seed factor_seed + m "
                       "(TTMc: factor_seed + 500 + m)",
            "ttmc_chunk_bytes": args.ttmc_chunk_bytes,
            "ttmc_chunking": "TTMc processes nonzeros in chunks of floor(ttmc_chunk_bytes / "
                             "(prod_{m != n} R_m * 4)) so the Kronecker intermediate stays bounded",
            "max_ttmc_output_floats": args.max_ttmc_output,
            "check_nnz": args.check_nnz, "smape_max_percent": args.smape_max,
            "check": "float64 reference on the CPU (torch float64, same formula); whole output "
                     "when nnz <= check_nnz, else a random subset of rows (reference built from "
                     "the nonzeros in those rows)",
            "timing": "1 warm-up, then reps timed calls, each including output allocation; "
                      "torch.cuda.synchronize() inside the timer on CUDA; 'all' sums the "
                      "per-mode median/min",
            "gen": {"nnz": args.gen_nnz, "seed": args.gen_seed, "dims": args.gen_dims}
            if args.gen_nnz else None,
        },
        "bandwidth_formula": BANDWIDTH_FORMULA,
        "copy_rate": copy,
        "tensors": records,
        "pass": not failed,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        log(f"wrote {args.out}")
    print(table(records, copy), flush=True)
    if failed:
        log("FAILED: an error, a NaN/Inf or a SMAPE over the bound (see above)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
