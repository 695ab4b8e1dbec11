"""This CPU's f32 and bf16 peaks (TFLOP/s, all cores, per CPU-second), measured the way
`kiln train` measures them for MFU (backend/cpu/gemm/cpu_peak.h), by build/bench/cpu_peak_bench.
The benches divide by these, never by a fixed number: machines of one kind differ by 2x."""
import os
import re
import subprocess


def measure(bench_dir, seconds=0.3):
    """{"f32", "bf16": TFLOP/s, "f32_unit", "bf16_unit": which unit gave it, "memory_gbs",
    "threads": n, "text": the bench's output}."""
    exe = os.path.join(bench_dir, "cpu_peak_bench")
    out = subprocess.run([exe, str(seconds)], check=True, capture_output=True, text=True).stdout
    f32 = re.search(r"^f32 peak\s+([\d.]+)\s+([\d.]+)\s+(.*)$", out, re.M)
    bf16 = re.search(r"^bf16 peak\s+([\d.]+)\s+([\d.]+)\s+(.*)$", out, re.M)
    memory = re.search(r"^memory GB/s\s+([\d.]+)\s+([\d.]+)", out, re.M)
    threads = re.search(r"all threads = (\d+)", out)
    if not (f32 and bf16 and memory and threads):
        raise RuntimeError(f"cannot read {exe}'s output:\n{out}")
    return {"f32": float(f32.group(2)), "bf16": float(bf16.group(2)), "f32_unit": f32.group(3).strip(),
            "bf16_unit": bf16.group(3).strip(), "memory_gbs": float(memory.group(2)),
            "threads": int(threads.group(1)), "text": out}
