#!/usr/bin/python3
"""A kiln train run with enable_tensorboard=true profiler=trace report=true, read back by
independent readers:

- TensorBoard event files: every record's framing and masked CRC-32C (computed here, in
  Python), each Event parsed with python3-protobuf from the published schema
  (tests/reference/tensorboard_event.proto, compiled by Debian's protoc), and every scalar
  compared with the run's metrics.jsonl (float32 rounding: the event stores a float).
- The Chrome trace: valid JSON, host and device tracks, named fusions and shaped GEMMs, and
  events covering >= 95% of every profiled step's wall time.
- The attribution table: rows sum to 100% +- 2%.

Usage: observability_test.py --kiln build/kiln [--keep DIR]
"""
import argparse
import glob
import importlib
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "reference", "tensorboard_event.proto")

# CRC-32C (Castagnoli), bitwise: deliberately not the table-driven code the writer uses.
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF

def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def read_records(path):
    data = open(path, "rb").read()
    pos, records = 0, []
    while pos < len(data):
        assert pos + 12 <= len(data), f"{path}: truncated header at byte {pos}"
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        assert length_crc == masked(crc32c(header)), f"{path}: bad length CRC at byte {pos}"
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert body_crc == masked(crc32c(body)), f"{path}: bad data CRC at byte {pos}"
        records.append(body)
        pos += 16 + length
    return records

def event_class(workdir):
    out = os.path.join(workdir, "pb")
    os.makedirs(out, exist_ok=True)
    subprocess.run(["protoc", f"--proto_path={os.path.dirname(PROTO)}", f"--python_out={out}", PROTO], check=True)
    sys.path.insert(0, out)
    return importlib.import_module("tensorboard_event_pb2").Event

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

def check_tensorboard(run_dir, workdir, stdout):
    Event = event_class(workdir)
    files = glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*"))
    assert len(files) == 1, f"expected one event file, found {files}"
    events = []
    for body in read_records(files[0]):
        e = Event()
        e.ParseFromString(body)
        # proto3 drops zero-valued fields when serializing, so compare field sets, not bytes.
        assert len(e.UnknownFields()) == 0, "the record holds fields outside the published schema"
        events.append(e)
    assert events[0].file_version == "brain.Event:2", events[0]
    metrics = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    # Eval events carry only eval/avg_loss; they follow the step they evaluate.
    evals = [(e.step, e.summary.value[0].simple_value) for e in events[1:]
             if [v.tag for v in e.summary.value] == ["eval/avg_loss"]]
    printed = [(int(a), float(b)) for a, b in re.findall(r"eval after step (\d+): eval loss ([\d.]+)", stdout)]
    assert printed and len(evals) == len(printed), (evals, printed)
    for (step, value), (p_step, p_loss) in zip(evals, printed):
        assert step == p_step and abs(value - p_loss) <= 5e-4, (step, value, p_step, p_loss)
    by_step = {e.step: {v.tag: v.simple_value for v in e.summary.value} for e in events[1:]
               if [v.tag for v in e.summary.value] != ["eval/avg_loss"]}
    assert sorted(by_step) == [m["step"] for m in metrics], (sorted(by_step), len(metrics))
    fields = {"learning/loss": "loss", "learning/lm_loss": "lm_loss", "learning/moe_lb_loss": "moe_lb_loss",
              "learning/z_loss": "z_loss", "learning/param_norm": "param_norm",
              "learning/total_weights": "total_weights",
              "learning/grad_norm": "grad_norm", "learning/raw_grad_norm": "raw_grad_norm",
              "learning/current_learning_rate": "learning_rate", "perf/step_time_seconds": "step_time_s",
              "perf/data_wait_seconds": "data_wait_s",
              "perf/per_device_tokens_per_sec": "tokens_per_s_per_device",
              "perf/per_device_tflops_per_sec": "tflops_per_s_per_device", "perf/mfu": "mfu"}
    checked = 0
    for m in metrics:
        scalars = by_step[m["step"]]
        for tag, key in fields.items():
            assert scalars[tag] == f32(m[key]), (m["step"], tag, scalars[tag], m[key])
            checked += 1
        # One device: no collectives, so no collective_wait (as in the console line).
        assert "collective_wait_s" not in m and "perf/collective_wait_seconds" not in scalars, m["step"]
        load = m.get("expert_load")
        if load:
            for layer, (mx, mean, dropped) in enumerate(load):
                assert scalars[f"moe/layer_{layer}/expert_load_max"] == f32(mx)
                assert scalars[f"moe/layer_{layer}/expert_load_mean"] == f32(mean)
                assert scalars[f"moe/layer_{layer}/dropped"] == f32(dropped)
                assert math.isclose(scalars[f"moe/layer_{layer}/load_imbalance"], mx / mean, rel_tol=1e-6)
                checked += 4
        else:
            assert not any(t.startswith("moe/") for t in scalars), m["step"]
    assert any(m.get("expert_load") for m in metrics), "no step logged the expert load"
    print(f"tensorboard: {len(events)} records, CRCs good, {checked} scalars equal metrics.jsonl, "
          f"{len(evals)} eval losses equal the printed ones")
    return events

def check_tensorboard_reader(run_dir, events, python):
    """TensorBoard's own reader (EventAccumulator, in the project venv) finds every scalar tag
    at every step Kiln logged, with the logged value."""
    reader = os.path.join(HERE, "..", "reference", "tensorboard_reader.py")
    if not os.path.exists(python):
        sys.exit(f"{python} is missing: run scripts/setup_venv.sh (tensorboard from PyPI)")
    out = subprocess.run([python, reader, os.path.join(run_dir, "tensorboard")], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"tensorboard_reader.py failed:\n{out.stderr}")
    tags = json.loads(out.stdout)["tags"]
    logged = {}
    for e in events[1:]:
        for v in e.summary.value:
            logged.setdefault(v.tag, []).append((e.step, v.simple_value))
    assert sorted(tags) == sorted(logged), (sorted(set(tags) ^ set(logged)))
    points = 0
    for tag, series in logged.items():
        theirs = [(step, float(value)) for step, value in tags[tag]]
        assert theirs == series, (tag, theirs[:5], series[:5])
        points += len(series)
    print(f"tensorboard's EventAccumulator: {len(tags)} scalar tags, {points} points, all at Kiln's steps and values")

def check_trace(run_dir, first, count):
    trace = json.load(open(os.path.join(run_dir, "profile", "trace.json")))
    events = trace["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e.get("name") == "process_name"}
    assert (0, "host") in names and (1, "device 0") in names, names
    spans = [e for e in events if e.get("ph") == "X"]
    steps = sorted((e for e in spans if e["cat"] == "step"), key=lambda e: e["ts"])
    assert [s["name"] for s in steps] == [f"step {k}" for k in range(first, first + count)], [s["name"] for s in steps]
    fusions = [e for e in spans if e["cat"] == "fusion"]
    assert fusions and all(e["name"].endswith("_fusion") and e["args"]["fused"] for e in fusions)
    assert any(re.match(r"layers\.\d+\.", e["name"]) for e in fusions), "no fusion carries a layer name"
    assert all(e["args"]["kind"] in ("loop", "input") and e["args"]["body"] and e["args"]["mbytes"] > 0
               for e in fusions), "a fusion lacks its kind, body opcodes or bytes"
    # gpt-oss's SwiGLU activation runs a logistic per element: the arithmetic is counted.
    assert any("logistic" in e["args"]["body"] and e["args"]["mtranscendental"] > 0 and e["args"]["mflop"] > 0
               for e in fusions), "no fusion counts the activation's logistic"
    gemms = [e for e in spans if e["cat"] == "gemm"]
    assert gemms and all(re.search(r" gemm \d+x\d+x\d+x\d+$", e["name"]) and "lhs" in e["args"] for e in gemms)
    assert any(e["cat"] == "data" for e in spans), "no data-wait span"
    others = [e for e in spans if e["cat"] != "step"]
    # Coverage over the profiled steps together (the measure); a loaded machine can
    # preempt the loop between two kernels for a few ms, so single steps vary more.
    worst, covered_total = 1.0, 0.0
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        ivals = sorted((max(lo, e["ts"]), min(hi, e["ts"] + e["dur"])) for e in others
                       if e["ts"] < hi and e["ts"] + e["dur"] > lo)
        covered, end = 0.0, lo
        for a, b in ivals:
            if b > end:
                covered += b - max(a, end)
                end = b
        worst = min(worst, covered / s["dur"])
        covered_total += covered
    coverage = covered_total / sum(s["dur"] for s in steps)
    assert coverage >= 0.95, f"trace events cover only {100 * coverage:.1f}% of the profiled steps"
    print(f"trace: {len(spans)} events, {len(fusions)} fusions, {len(gemms)} gemms; events cover "
          f"{100 * coverage:.1f}% of {len(steps)} profiled steps (the least covered step: {100 * worst:.1f}%)")

def check_attribution(run_dir, stdout):
    table = open(os.path.join(run_dir, "profile", "attribution.txt")).read()
    assert table.strip() in stdout, "the table is not printed at the end of the run"
    rows = dict(re.findall(r"^  (\S.*?)\s+[\d.]+\s+([\d.]+)%", table, re.M))
    for row in ["gemm", "attention", "fused elementwise", "data wait", "host overhead", "rematerialization"]:
        assert row in rows, (row, rows)
    parts = sum(float(v) for k, v in rows.items() if k != "total")
    assert abs(parts - 100.0) <= 2.0 and abs(float(rows["total"]) - 100.0) <= 2.0, table
    shapes = [json.loads(l) for l in open(os.path.join(run_dir, "profile", "gemm_shapes.jsonl"))]
    assert shapes and all(s["m"] > 0 and s["n"] > 0 and s["k"] > 0 for s in shapes)
    # The gemm row is exactly its shapes (what bench/gemm_shapes_bench times again): the same
    # seconds and the same rate, i.e. the FLOPs of the kernels that were timed (print rounding:
    # 4 decimals of s/step, 1 of GFLOP/s).
    row = re.search(r"^  gemm\s+([\d.]+)\s+[\d.]+%\s+([\d.]+) GFLOP/s", table, re.M)
    assert row, table
    shape_s = sum(s["seconds_per_step"] for s in shapes)
    shape_gflops = sum(2.0 * s["batch"] * s["m"] * s["n"] * s["k"] * s["count_per_step"] for s in shapes) / shape_s / 1e9
    assert abs(float(row.group(1)) - shape_s) <= 6e-5 + 1e-6 * shape_s, (row.group(1), shape_s)
    assert abs(float(row.group(2)) - shape_gflops) <= 0.06, (row.group(2), shape_gflops)
    print(f"attribution: rows sum to {parts:.1f}%, {len(shapes)} GEMM shapes whose time and FLOPs are the gemm row's")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--keep", help="run in this directory and keep it")
    ap.add_argument("--venv-python", required=True, help="the project venv's python (TensorBoard's reader)")
    args = ap.parse_args()
    workdir = args.keep or tempfile.mkdtemp(prefix="kiln_obs_")
    first, count = 2, 3
    # Real text with an eval split, so eval/avg_loss is logged too (fortunes: scripts/setup.sh).
    cmd = [args.kiln, "train", "model_name=gpt-oss-tiny", "steps=6", "log_period=2", "run_name=obs",
           "override_model_config=true", "dataset_type=text", "dataset_path=/usr/share/games/fortunes",
           "tokenizer_type=bytes", "vocab_size=258", f"dataset_cache_dir={workdir}/corpus", "eval_interval=3",
           "eval_steps=1",
           f"base_output_directory={workdir}", "enable_tensorboard=true", "profiler=trace",
           f"skip_first_n_steps_for_profiler={first}", f"profiler_steps={count}", "report=true",
           "enable_checkpointing=false"]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        sys.exit(f"kiln train failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
    run_dir = os.path.join(workdir, "obs")
    events = check_tensorboard(run_dir, workdir, run.stdout)
    check_tensorboard_reader(run_dir, events, args.venv_python)
    check_trace(run_dir, first, count)
    check_attribution(run_dir, run.stdout)
    if not args.keep:
        shutil.rmtree(workdir)

if __name__ == "__main__":
    main()
