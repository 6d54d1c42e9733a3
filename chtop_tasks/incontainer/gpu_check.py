#!/usr/bin/env python3
"""A real GPU compute check: `python chtop_tasks/incontainer/gpu_check.py`.

Runs standalone (no chtop imports) on a host or inside a sandbox, one line
per step.  Exit status: 0 the GPU computed the right answer; 1 it did not
(or nothing could compute); 77 skipped, there are no NVIDIA device nodes.

nvidia-smi alone opens no CUDA context, so it is only reported, never
counted: the check is a cupy reduction when cupy imports, else a kernel
compiled with nvcc, and its result is compared with the known answer.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
N = 1 << 20  # elements summed on the device
EXPECTED = N * (N - 1) // 2  # sum of 0..N-1

KERNEL = r"""
#include <cstdio>
__global__ void iota_sum(unsigned long long *out, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, i);
}
int main() {
    const unsigned long long n = %(n)d;
    unsigned long long *d = 0, h = 0;
    cudaError_t err = cudaMalloc(&d, sizeof h);
    if (err != cudaSuccess) { printf("ERROR cudaMalloc: %%s\n", cudaGetErrorString(err)); return 2; }
    cudaMemset(d, 0, sizeof h);
    iota_sum<<<(unsigned)((n + 255) / 256), 256>>>(d, n);
    err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { printf("ERROR kernel: %%s\n", cudaGetErrorString(err)); return 2; }
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(d);
    printf("RESULT %%llu\n", h);
    return 0;
}
"""


def step(name: str, status: str, detail: str = "") -> None:
    print(f"gpu-check: {name:<12} {status}{(': ' + detail) if detail else ''}", flush=True)


def device_nodes() -> list[str]:
    return sorted(p for p in glob.glob("/dev/nvidia*") if not os.path.isdir(p))


def nvidia_smi() -> None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        step("nvidia-smi", "absent", "informational only")
        return
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=60)
        first = (out.stdout or out.stderr).strip().splitlines()
        step("nvidia-smi", "ok" if out.returncode == 0 else f"exit {out.returncode}",
             (first[0] if first else "") + " (informational: opens no CUDA context)")
    except (OSError, subprocess.TimeoutExpired) as exc:
        step("nvidia-smi", "error", str(exc))


def check_cupy() -> bool | None:
    """True/False: cupy computed right/wrong; None: cupy is not importable."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library load error
        step("cupy", "unavailable", f"{type(exc).__name__}: {exc}".splitlines()[0])
        return None
    try:
        values = cupy.arange(N, dtype=cupy.uint64)
        got = int(values.sum())
        squares = float(cupy.sum(cupy.arange(1000, dtype=cupy.float64) ** 2))
        cupy.cuda.Stream.null.synchronize()
        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
        name = name.decode() if isinstance(name, bytes) else name
    except Exception as exc:
        step("cupy", "FAIL", f"{type(exc).__name__}: {exc}".splitlines()[0])
        return False
    want_squares = sum(i * i for i in range(1000))
    ok = got == EXPECTED and squares == want_squares
    step("cupy", "PASS" if ok else "FAIL",
         f"on {name}: sum(0..{N - 1}) = {got} (expected {EXPECTED}), "
         f"sum of squares = {squares:.0f} (expected {want_squares})")
    return ok


def check_nvcc() -> bool | None:
    """True/False: the compiled kernel computed right/wrong; None: no nvcc."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        for guess in ("/usr/local/cuda/bin/nvcc",):
            if os.access(guess, os.X_OK):
                nvcc = guess
    if nvcc is None:
        step("nvcc", "unavailable", "nvcc is not on PATH")
        return None
    with tempfile.TemporaryDirectory(prefix="chtop-gpu-check-") as tmp:
        src, exe = os.path.join(tmp, "sum.cu"), os.path.join(tmp, "sum")
        with open(src, "w") as handle:
            handle.write(KERNEL % {"n": N})
        build = subprocess.run([nvcc, "-o", exe, src], capture_output=True, text=True, timeout=600)
        if build.returncode != 0:
            step("nvcc", "FAIL", "compile failed: " + (build.stderr.strip().splitlines() or ["?"])[-1])
            return False
        step("nvcc", "ok", f"compiled with {nvcc}")
        result = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    out = result.stdout.strip()
    got = None
    if out.startswith("RESULT "):
        got = int(out.split()[1])
    ok = result.returncode == 0 and got == EXPECTED
    step("kernel", "PASS" if ok else "FAIL",
         f"sum(0..{N - 1}) = {got} (expected {EXPECTED})" if got is not None
         else f"exit {result.returncode}: {out or result.stderr.strip()}")
    return ok


def main() -> int:
    nodes = device_nodes()
    if not nodes:
        step("devices", "SKIP", "no NVIDIA device nodes (/dev/nvidia*): nothing to check")
        return SKIP
    step("devices", "ok", " ".join(nodes))
    nvidia_smi()
    result = check_cupy()
    if result is None:
        result = check_nvcc()
    if result is None:
        step("result", "FAIL", "neither cupy nor nvcc is available: no compute check was possible")
        return 1
    step("result", "PASS" if result else "FAIL")
    return 0 if result else 1


if __name__ == "__main__":
    sys.exit(main())
