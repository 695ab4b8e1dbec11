#!/usr/bin/python3
"""Runs the shell examples in docs/*.md and README.md that are marked runnable, so the
documentation never rots.

Marking: an HTML comment line `<!-- runnable -->` (invisible when rendered) directly above a
```sh fence. Every line of the block then runs, in order, under `bash -euo pipefail` in a
fresh temporary directory that holds `build` (a link to the build directory) and `configs`
(a link to the repository's configs), so examples are written exactly as a user types them
from the repository root (`build/kiln train ...`) and write their outputs (out/...) into
the temporary directory. A block fails the test when it exits non-zero or runs longer than
--timeout seconds: keep runnable examples small (tiny models, a few steps). A line meant to
fail is written `! build/kiln ...`.

Usage: run_doc_examples.py --build-dir BUILD --source-dir REPO [FILES...]
       run_doc_examples.py --self-test      (the harness checks itself on a fixture)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r"^\s*<!--\s*runnable\s*-->\s*$")
FENCE = re.compile(r"^```sh\b")


def runnable_blocks(text):
    """[(line number of the fence, block text)] for every marked ```sh block."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        if MARK.match(lines[i]) and i + 1 < len(lines) and FENCE.match(lines[i + 1]):
            start = i + 1
            j = start + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j == len(lines):
                raise SystemExit(f"line {start + 1}: unterminated runnable block")
            blocks.append((start + 1, "\n".join(lines[start + 1:j])))
            i = j
        i += 1
    return blocks


def run_block(block, build_dir, source_dir, timeout):
    with tempfile.TemporaryDirectory(prefix="kiln_doc_") as work:
        os.symlink(os.path.abspath(build_dir), os.path.join(work, "build"))
        os.symlink(os.path.join(os.path.abspath(source_dir), "configs"), os.path.join(work, "configs"))
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), KILN_PROGRESS="off")
        try:
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=work, env=env, capture_output=True,
                               text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout} s"
        return r.returncode == 0, f"exit {r.returncode}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"


def run_files(files, build_dir, source_dir, timeout):
    failures, count = 0, 0
    for path in files:
        for line, block in runnable_blocks(open(path).read()):
            count += 1
            t0 = time.time()
            ok, detail = run_block(block, build_dir, source_dir, timeout)
            where = f"{os.path.relpath(path, source_dir)}:{line}"
            print(f"{'ok  ' if ok else 'FAIL'} {where} ({time.time() - t0:.1f} s)")
            if not ok:
                failures += 1
                print(f"  block:\n    " + block.replace("\n", "\n    ") + "\n  " + detail)
    print(f"{count} runnable examples, {failures} failed")
    return count, failures


def self_test():
    """The harness must find marked blocks only, and must fail on a failing one."""
    doc = "\n".join(["# t", "```sh", "exit 1   # not marked: never run", "```",
                     "<!-- runnable -->", "```sh", "test -L build && test -L configs", "echo hi > out.txt",
                     "```", "<!-- runnable -->", "```sh", "false", "```", ""])
    blocks = runnable_blocks(doc)
    assert [l for l, _ in blocks] == [6, 11], blocks
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.md")
        open(path, "w").write(doc)
        count, failures = run_files([path], d, d, 30)
    assert (count, failures) == (2, 1), (count, failures)
    print("self-test passed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir")
    ap.add_argument("--source-dir")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if a.self_test:
        self_test()
        return
    files = a.files or sorted(
        [os.path.join(a.source_dir, "docs", f) for f in os.listdir(os.path.join(a.source_dir, "docs")) if f.endswith(".md")]
        + [os.path.join(a.source_dir, "README.md")])
    count, failures = run_files(files, a.build_dir, a.source_dir, a.timeout)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
