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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("site")
    ap.add_argument("--arch", action="append")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "kernel-gate"))
    args = ap.parse_args()
    archs = args.arch or ["sm_80", "sm_90"]
    os.makedirs(args.out, exist_ok=True)
    lib = load_nvrtc(args.site)
    includes = [
        KERNELS,
        os.path.join(args.site, "nvidia", "cuda_runtime", "include"),
        os.path.join(args.site, "nvidia", "cuda_nvcc", "include"),
    ]
    ptxas = os.path.join(args.site, "nvidia", "cuda_nvcc", "bin", "ptxas")
    failures = []
    sources = sorted(glob.glob(os.path.join(KERNELS, "*.cu")))
    print(f"{'file':<13} {'kernel':<22} {'arch':<6} {'regs':>4} {'stack':>6} {'spill st':>8} {'spill ld':>8} {'smem':>6}")
    for src in sources:
        name = os.path.splitext(os.path.basename(src))[0]
        for arch in archs:
            compute = arch.replace("sm_", "compute_")
            options = [f"--gpu-architecture={compute}", "--std=c++17", "-default-device", "-lineinfo"]
            options += [f"--include-path={i}" for i in includes]
            ptx, log = nvrtc_compile(lib, src, options)
            if ptx is None:
                failures.append(f"{name} {arch}: NVRTC error\n{log}")
                continue
            if log:
                print(f"NVRTC log for {name} {arch}:\n{log}")
            ptx_path = os.path.join(args.out, f"{name}.{arch}.ptx")
            open(ptx_path, "w").write(ptx)
            res = subprocess.run([ptxas, "-v", f"-arch={arch}", ptx_path, "-o", os.devnull],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                failures.append(f"{name} {arch}: ptxas error\n{res.stderr}")
                continue
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
                print(f"{name:<13} {f:<22} {arch:<6} {s['regs']:>4} {s['stack']:>6} {s['st']:>8} {s['ld']:>8} {s['smem']:>6}")
                if s["st"] or s["ld"] or s["stack"]:
                    failures.append(f"{f} {arch}: {s['stack']} bytes stack frame, "
                                    f"{s['st']} bytes spill stores, {s['ld']} bytes spill loads")
    if failures:
        print("\nKERNEL GATE FAILED:", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        return 1
    print(f"\nkernel gate passed: {len(sources)} kernel files x {len(archs)} archs, no spills, no stack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
