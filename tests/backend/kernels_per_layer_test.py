#!/usr/bin/python3
"""Generated kernels do not depend on the layer count: after `kiln compile` of gpt-oss-tiny
with 2 layers fills an empty kernel cache, the same model with 6 layers builds nothing
(every fused kernel of the deeper step is one the shallower step already compiled). This is
what keeps a first compile from growing with depth; a kernel whose source grows with the
number of parameters (a fused chain over every parameter, say) fails it.

Usage: kernels_per_layer_test.py --kiln build/kiln
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def compile_report(kiln, layers, cache):
    cmd = [kiln, "compile", "model_name=gpt-oss-tiny", "override_model_config=true",
           f"base_num_decoder_layers={layers}"]
    run = subprocess.run(cmd, capture_output=True, text=True,
                         env=dict(os.environ, KILN_CACHE_DIR=cache, KILN_PROGRESS="off"))
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
    built = re.search(r"compile: [\d.]+ s, (\d+) kernel libraries built", run.stdout)
    distinct = re.search(r"kernels: (\d+) fused \((\d+) distinct\)", run.stdout)
    assert built and distinct, run.stdout
    return int(built.group(1)), int(distinct.group(1)), int(distinct.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="kiln_kernels_per_layer_")
    try:
        built2, fused2, distinct2 = compile_report(args.kiln, 2, cache)
        built6, fused6, distinct6 = compile_report(args.kiln, 6, cache)
    finally:
        shutil.rmtree(cache)
    assert built2 > 0, "the first compile into an empty cache built nothing"
    assert fused6 > fused2, (fused2, fused6)
    assert distinct6 == distinct2, f"distinct kernels: {distinct2} at 2 layers, {distinct6} at 6"
    assert built6 == 0, f"6 layers built {built6} kernel libraries that 2 layers did not have"
    print(f"2 layers: {fused2} fused kernels, {distinct2} distinct, {built2} libraries built; "
          f"6 layers: {fused6} fused, {distinct6} distinct, nothing built")


if __name__ == "__main__":
    main()
