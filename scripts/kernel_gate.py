#!/usr/bin/env python3
"""Compile every kernels/*.cu with NVRTC (ctypes on libnvrtc from the PyPI wheel) to PTX
for each architecture, assemble it with the wheel's `ptxas -v`, print the register and
spill report, and exit non-zero on a compile error, a spill, or a stack frame.

Usage: kernel_gate.py SITE_PACKAGES [--arch sm_80 --arch sm_90] [--out DIR]
"""
import argparse
import ctypes
import glob
import os
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "kernels")


def load_nvrtc(site):
    libs = sorted(glob.glob(os.path.join(site, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")))
    libs = [l for l in libs if ".alt." not in l and "builtins" not in l]
    if not libs:
        sys.exit(f"kernel gate: no libnvrtc.so under {site}/nvidia/cuda_nvrtc/lib")
    return ctypes.CDLL(libs[0])


def nvrtc_compile(lib, path, options):
    src = open(path, "rb").read()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, os.path.basename(path).encode(), 0, None, None)
    if rc != 0:
        return None, f"nvrtcCreateProgram failed ({rc})"
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    rc = lib.nvrtcCompileProgram(prog, len(options), opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    log = log.value.decode(errors="replace").strip()
    ptx = None
    if rc == 0:
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, buf)
        ptx = buf.value.decode()
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx, log


def included_size(path, seen=None):
    """Bytes of `path` and of every kernels/ header it includes, recursively: the jobs
    are started largest first, so the longest compile does not start last."""
    seen = set() if seen is None else seen
    if path in seen or not os.path.isfile(path):
        return 0
    seen.add(path)
    text = open(path, encoding="utf-8", errors="replace").read()
    total = len(text)
    for inc in re.findall(r'^\s*#include\s+"([^"]+)"', text, re.M):
        total += included_size(os.path.join(KERNELS, inc), seen)
    return total


# Set in each worker process by `init_worker`.
WORKER = {}


def init_worker(site, out):
    WORKER["lib"] = load_nvrtc(site)
    WORKER["site"] = site
    WORKER["out"] = out


def gate_one(src, arch):
    """One file for one architecture: NVRTC to PTX, then `ptxas -v`. Returns the report
    lines and the failures."""
    site, out, lib = WORKER["site"], WORKER["out"], WORKER["lib"]
    includes = [
        KERNELS,
        os.path.join(site, "nvidia", "cuda_runtime", "include"),
        os.path.join(site, "nvidia", "cuda_nvcc", "include"),
    ]
    ptxas = os.path.join(site, "nvidia", "cuda_nvcc", "bin", "ptxas")
    name = os.path.splitext(os.path.basename(src))[0]
    lines, failures = [], []
    compute = arch.replace("sm_", "compute_")
    options = [f"--gpu-architecture={compute}", "--std=c++17", "-default-device", "-lineinfo"]
    options += [f"--include-path={i}" for i in includes]
    ptx, log = nvrtc_compile(lib, src, options)
    if ptx is None:
        return lines, [f"{name} {arch}: NVRTC error\n{log}"]
    if log:
        lines.append(f"NVRTC log for {name} {arch}:\n{log}")
    ptx_path = os.path.join(out, f"{name}.{arch}.ptx")
    open(ptx_path, "w").write(ptx)
    res = subprocess.run([ptxas, "-v", f"-arch={arch}", ptx_path, "-o", os.devnull],
                         capture_output=True, text=True)
    if res.returncode != 0:
        return lines, [f"{name} {arch}: ptxas error\n{res.stderr}"]
    # ptxas -v prints, per function: "Compiling entry function 'f'", then
    # "N bytes stack frame, N bytes spill stores, N bytes spill loads" and
    # "Used N registers, ... N bytes smem ...".
    func = None
    stats = {}
    for line in res.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            func = m.group(1)
            stats[func] = {"regs": 0, "stack": 0, "st": 0, "ld": 0, "smem": 0}
            continue
        if func is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            stats[func].update(stack=int(m.group(1)), st=int(m.group(2)), ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            stats[func]["regs"] = int(m.group(1))
        m = re.search(r"(\d+) bytes smem", line)
        if m:
            stats[func]["smem"] = int(m.group(1))
    if not stats:
        failures.append(f"{name} {arch}: no entry function in the ptxas report\n{res.stderr}")
    for f, s in stats.items():
        lines.append(f"{name:<13} {f:<22} {arch:<6} {s['regs']:>4} {s['stack']:>6} {s['st']:>8} {s['ld']:>8} {s['smem']:>6}")
        if s["st"] or s["ld"] or s["stack"]:
            failures.append(f"{f} {arch}: {s['stack']} bytes stack frame, "
                            f"{s['st']} bytes spill stores, {s['ld']} bytes spill loads")
    return lines, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("site")
    ap.add_argument("--arch", action="append")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "kernel-gate"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="compiles at once, each in its own process (default: the CPU count)")
    args = ap.parse_args()
    archs = args.arch or ["sm_80", "sm_90"]
    os.makedirs(args.out, exist_ok=True)
    load_nvrtc(args.site)  # fails here, once, when the wheel is missing
    sources = sorted(glob.glob(os.path.join(KERNELS, "*.cu")))
    jobs = [(src, arch) for src in sources for arch in archs]
    # Processes, not threads: each holds its own NVRTC and nothing is shared.
    with ProcessPoolExecutor(max_workers=max(1, args.jobs), initializer=init_worker,
                             initargs=(args.site, args.out)) as pool:
        order = sorted(jobs, key=lambda j: -included_size(j[0]))
        futures = {job: pool.submit(gate_one, *job) for job in order}
        results = {job: fut.result() for job, fut in futures.items()}
    print(f"{'file':<13} {'kernel':<22} {'arch':<6} {'regs':>4} {'stack':>6} {'spill st':>8} {'spill ld':>8} {'smem':>6}")
    failures = []
    for job in jobs:
        lines, fails = results[job]
        for line in lines:
            print(line)
        failures += fails
    if failures:
        print("\nKERNEL GATE FAILED:", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        return 1
    print(f"\nkernel gate passed: {len(sources)} kernel files x {len(archs)} archs, no spills, no stack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
