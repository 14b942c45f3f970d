#!/usr/bin/env python3
"""Per-rank memory and per-iteration time of distributed CP-ALS and CP-APR (rank 16) for
FROSTT's largest tensors, from the costs measured on one machine (docs/distributed.md
says how each was measured) and the medium-grained grid sptmc chooses
(src/dist/partition.rs). Prints the markdown tables of docs/distributed.md."""

import math

R = 16
TENSORS = {  # FROSTT: extents and nonzeros
    "Amazon": ([4_821_207, 1_774_269, 1_805_187], 1_741_809_018),
    "Patents": ([46, 239_172, 239_172], 3_596_640_708),
    "Reddit-2015": ([8_211_298, 176_962, 8_116_559], 4_687_474_081),
}
RANKS = [16, 64, 256, 1024]

# Measured on this machine (AMD EPYC, one thread, release build; see the doc).
CPU_NS_PER_NNZ_MODE = 37.2  # MTTKRP, uboot-commitwords-3d, rank 16
CPU_NS_PER_ROW = 222.0  # solve, Gram, norms per factor row and iteration, rank 16
# Measured on an H100 (bench/results/2026-11-23-h100-second-run).
GPU_NS_PER_NNZ_MODE = 0.043  # MTTKRP kernel, uniform 50 M nonzeros, rank 32
GPU_BUS_BYTES_PER_S = 7.6e9  # factor rows up and MTTKRP rows back, CP-ALS on uboot
GPU_HOST_NS_PER_ROW = 7.1  # host dense algebra per row (16 host threads)
# CP-APR (CPU only: across ranks it needs the CPU's f64 Φ sessions). CPU time per
# nonzero and Φ evaluation, the session's fix per mode and the log-likelihood's Φ
# included: uboot-commitwords-3d, rank 16, 10 inner iterations per mode, one thread.
APR_NS_PER_NNZ_EVAL = 6.4
APR_INNER = 10  # Φ evaluations per mode and iteration (pyttb's maxinneriters)
APR_PI_BYTES = 8 * R  # the session's π per nonzero (f64)
# Assumed network (not measurable here): 100 Gb/s per rank, 2 us per message.
NET_BYTES_PER_S = 12.5e9
NET_LATENCY_S = 2e-6
# Bytes per nonzero of a rank's block (see the doc), for order N: the tensor as read
# (a u32 index per mode and an f64 value), the HLS form (a 4-byte key, an fp16 value
# and 3 bytes of block metadata), and on the CPU its row groups (per mode the other
# modes' u32 indices and an f32 value, and a row label). Measured: 73 bytes per nonzero
# for a CPU rank's CP-ALS on a uniform 3rd-order tensor (the formula gives 69).
def coo_bytes(n):
    return 4 * n + 8


HLS_BYTES = 9


def row_group_bytes(n):
    return 4 * n * n + 4


# The input phase's peak per nonzero of the rank's share (its text, its entries, the
# all-to-all's received arrays): 57 from 3rd-order text, measured (46 from .sptb).
INPUT_PEAK_BYTES = 57


def prime_factors(n):
    out, f = [], 2
    while f * f <= n:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    if n > 1:
        out.append(n)
    return out


def grid(p, dims):
    shape = [1] * len(dims)
    for f in sorted(prime_factors(p), reverse=True):
        fits = [m for m in range(len(dims)) if shape[m] * f <= dims[m]] or list(range(len(dims)))
        m = max(fits, key=lambda m: (dims[m] / shape[m], -m))
        shape[m] *= f
    return shape


def plan(dims, nnz, p, gpu):
    shape = grid(p, dims)
    n = len(dims)
    slab = [d / s for d, s in zip(dims, shape)]
    q = [p / s for s in shape]
    own = [s / qq for s, qq in zip(slab, q)]
    nnz_rank = nnz / p
    # Memory: the block (the tensor as read, the HLS form, on the CPU the row groups),
    # the slabs of every factor, one MTTKRP output, the owned rows and one mode's
    # reduction (the partial rows received, about a slab, and their sums), f32 (each
    # rank draws only its slabs' rows); the input phase's peak.
    per_nnz = coo_bytes(n) + HLS_BYTES + (0 if gpu else row_group_bytes(n))
    reduction = max(s + o for s, o in zip(slab, own))
    factor_bytes = (sum(slab) + max(slab) + sum(own) + reduction) * R * 4
    steady = nnz_rank * per_nnz + factor_bytes
    peak_input = nnz_rank * INPUT_PEAK_BYTES
    # Time per iteration.
    rows_owned = sum(own)
    if gpu:
        kernel = n * nnz_rank * GPU_NS_PER_NNZ_MODE * 1e-9
        bus = n * (sum(slab) + max(slab)) * R * 4 / GPU_BUS_BYTES_PER_S
        dense = rows_owned * GPU_HOST_NS_PER_ROW * 1e-9
        compute = kernel + bus + dense
    else:
        compute = n * nnz_rank * CPU_NS_PER_NNZ_MODE * 1e-9 + rows_owned * CPU_NS_PER_ROW * 1e-9
    sent = sum(2 * s * R * 4 * (qq - 1) / qq for s, qq in zip(slab, q))
    messages = sum(2 * (qq - 1) for qq in q) + 3 * n * 2 * math.log2(max(p, 2))
    comm = sent / NET_BYTES_PER_S + messages * NET_LATENCY_S
    return shape, steady, peak_input, compute, comm, sent


def plan_apr(dims, nnz, p):
    """CP-APR per rank: memory (the block, the session's π, the slabs in f64 with their
    Φ), bytes sent and CPU seconds per iteration with APR_INNER evaluations per mode."""
    shape = grid(p, dims)
    n = len(dims)
    slab = [d / s for d, s in zip(dims, shape)]
    q = [p / s for s in shape]
    own = [s / qq for s, qq in zip(slab, q)]
    nnz_rank = nnz / p
    e = APR_INNER
    # The block with the session's π; the slabs and the owned rows' last Φ, the block's
    # Φ of a slab and one slab-sized exchange buffer, f64.
    per_nnz = coo_bytes(n) + HLS_BYTES + row_group_bytes(n) + APR_PI_BYTES
    steady = nnz_rank * per_nnz + (sum(slab) + sum(own) + 2 * max(slab)) * R * 8
    compute = nnz_rank * (n * e + 1) * APR_NS_PER_NNZ_EVAL * 1e-9
    sent = sum((e * (s - o) + (e + 1) * o * (qq - 1)) * R * 8 for s, o, qq in zip(slab, own, q))
    messages = sum((2 * e + 1) * (qq - 1) for qq in q) + (3 * e + n + 2) * 2 * math.log2(max(p, 2))
    comm = sent / NET_BYTES_PER_S + messages * NET_LATENCY_S
    return shape, steady, compute, comm, sent


def gb(x):
    return f"{x / 1e9:.2f}"


for name, (dims, nnz) in TENSORS.items():
    print(f"\n### {name}: {dims}, {nnz:,} nonzeros, rank {R}\n")
    print("| ranks | grid | nnz per rank (M) | peak memory per rank, CPU / GPU rank's host (GB) | "
          "bytes sent per rank and iteration (MB) | CPU s/iter (compute + comm) | "
          "GPU s/iter (compute + comm) |")
    print("|---|---|---|---|---|---|---|")
    for p in RANKS:
        shape, steady, peak, cpu, comm, sent = plan(dims, nnz, p, False)
        _, steady_gpu, _, gpu, _, _ = plan(dims, nnz, p, True)
        print(f"| {p} | {'×'.join(map(str, shape))} | {nnz / p / 1e6:.1f} | "
              f"{gb(max(peak, steady))} / {gb(max(peak, steady_gpu))} | {sent / 1e6:.1f} | "
              f"{cpu + comm:.3f} ({cpu:.3f} + {comm:.3f}) | {gpu + comm:.4f} ({gpu:.4f} + {comm:.3f}) |")
    print(f"\nCP-APR ({APR_INNER} Φ evaluations per mode and iteration, CPU):\n")
    print("| ranks | memory per rank, steady (GB) | bytes sent per rank and iteration (MB) | "
          "CPU s/iter (compute + comm) |")
    print("|---|---|---|---|")
    for p in RANKS:
        _, steady, cpu, comm, sent = plan_apr(dims, nnz, p)
        print(f"| {p} | {gb(steady)} | {sent / 1e6:.1f} | {cpu + comm:.2f} ({cpu:.2f} + {comm:.3f}) |")
