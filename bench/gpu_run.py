#!/usr/bin/env python3
"""make gpu: Kiln on one NVIDIA GPU beside the same step in JAX, in one short run.

On a machine with an NVIDIA GPU and XLA's CUDA PJRT plugin (the `jax-cuda13-pjrt` wheel that
`jax[cuda13]` installs), trains through `backend=pjrt pjrt_plugin=<the plugin>`
  small  gpt-oss-small, bf16 compute with f32 weights, batch 8 x 1024 tokens, no remat;
         JAX starts from Kiln's initial weights (a 0-step Kiln run saves them, the constant
         tensors perturbed as bench/peers.py does), so the two step-0 losses must agree
         to bf16 rounding;
  large  the seed's GPT-OSS shape (configs/gpt-oss-3.5b-v6e4.yml: d 2048, 16 experts top-2,
         vocab 32768, 1 x 1024 tokens, remat full, bf16) on one device, with as many of its 16
         layers as the card's memory holds (--large-layers; auto: 16 on an 80 GB card). Its
         checkpoint would be 42 GB, so JAX draws Kiln's initialisers itself (same
         distributions, other values: the step-0 losses agree only roughly);
each for --steps steps beside the same step in JAX (bench/jax_gpt_oss.py: the whole step
under one jax.jit, MaxText's model, MoE through jax.lax.ragged_dot as Kiln's GPU lowering
uses chlo.ragged_dot) on the same GPU, and prints per model and side the median step time
(after --warmup steps), tokens/s, TFLOP/s by MaxText's formula (as Kiln logs it), MFU
against the card's bf16 dense peak (configs/targets/<card>.yml, or --peak-tflops), memory
(XLA's compiled plan; for JAX the peak in use where it reports one; and nvidia-smi's
largest reading, which includes XLA's preallocated pool: 75% of the card on both sides)
and the step-0 loss, with the card's name. The same goes to --json.

Without a GPU it prints one line and exits 0. Every child process runs under a timeout cut
from --time-limit (default 480 s: a GPU machine rented for a few minutes runs it whole); a
run cut short reports the steps it finished. Exit status: 0 when every run finished, 1 when
one failed or was cut short, 2 for bad arguments.

The driver needs only Python 3's standard library until a GPU is found (then numpy, which
JAX brings). It runs from the checkout (build/kiln) or from the bundle `make gpu-bundle`
makes (dist/kiln-gpu: kiln with its shared libraries, configs, these scripts), which is
preferred when present; a GPU machine needs none of Kiln's Debian packages.

Usage: python3 bench/gpu_run.py [--kiln PATH] [--plugin PATH] [--python PATH] [--steps N]
         [--warmup N] [--time-limit S] [--model small|large|both] [--large-layers N]
         [--peak-tflops X] [--sides kiln,jax] [--set KEY=VALUE ...] [--out-dir DIR] [--json PATH]
         [--dry-run]
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # the checkout, or the bundle (bench/ beside kiln)
PROG = "make gpu"
GIB = float(1 << 30)

# The card's bf16 dense peak: Kiln's target files where there is one, else the datasheet's
# sparse figure halved. Checked in this order (GH200 before H200: the name contains it).
CARDS = [
    ("B200", "b200.yml", None),
    ("GH200", "h100.yml", None),  # the GH200's GPU is an H100 SXM (HBM3e)
    ("H200", "h200.yml", None),
    ("H100 PCIe", None, 756.0),   # datasheet: 1513 TFLOP/s bf16 with sparsity
    ("H100 NVL", None, 835.0),    # datasheet: 1671 TFLOP/s bf16 with sparsity
    ("H100", "h100.yml", None),
    ("A100", None, 312.0),        # datasheet: 312 TFLOP/s bf16 dense
]

# What each model trains (Kiln keys; the JAX side gets the same config through `kiln config`).
COMMON = ["reuse_example_batch=1", "dataset_type=synthetic", "log_period=1", "enable_tensorboard=false"]
SMALL = ["model_name=gpt-oss-small", "override_model_config=true", "per_device_batch_size=8",
         "max_target_length=1024", "dtype=bfloat16", "weight_dtype=float32", "remat_policy=none",
         "learning_rate=1e-4"]
LARGE_FILE = "gpt-oss-3.5b-v6e4.yml"
# One device; no bf16 weight copies as step state (7 GB at 3.5B; MaxText, and JAX here, cast
# the weights where they are used).
LARGE = ["ici_fsdp_parallelism=1", "ici_expert_parallelism=1", "bf16_weight_copy=false"]
LARGE_MAX_LAYERS = 16
# Both sides' XLA GPU clients preallocate this share of the card (the plugin's default and
# JAX's), so the large model must fit in it.
MEM_FRACTION = 0.75


# ------------------------------------------------------------------------------------------
# Arguments


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the usage too)
        print("%s: error: %s (see --help)" % (PROG, message), file=sys.stderr)
        sys.exit(2)


def positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    if v < 1:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    return v


def nonnegative_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an integer >= 0, got %r" % text)
    if v < 0:
        raise argparse.ArgumentTypeError("expected an integer >= 0, got %r" % text)
    return v


def positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive number, got %r" % text)
    if not v > 0:
        raise argparse.ArgumentTypeError("expected a positive number, got %r" % text)
    return v


def sides(text):
    names = [s for s in text.split(",") if s]
    if not names or any(s not in ("kiln", "jax") for s in names):
        raise argparse.ArgumentTypeError("expected kiln, jax or kiln,jax, got %r" % text)
    return names


def parse_args(argv):
    ap = Parser(prog="bench/gpu_run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", help="the kiln binary (default: the bundle's, else build/kiln)")
    ap.add_argument("--plugin", help="the CUDA PJRT plugin .so (default: $KILN_CUDA_PLUGIN, else the "
                    "jax_plugins.xla_cuda13 package of --python, else Kiln's venv)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter with JAX for the JAX side "
                    "(default: this one)")
    ap.add_argument("--steps", type=positive_int, default=30, help="steps per run (default 30)")
    ap.add_argument("--warmup", type=nonnegative_int, default=None,
                    help="first steps left out of the median (default 5, at most half of --steps)")
    ap.add_argument("--time-limit", type=positive_float, default=480.0,
                    help="seconds for the whole run, children included (default 480)")
    ap.add_argument("--model", choices=["small", "large", "both"], default="both")
    ap.add_argument("--large-layers", type=positive_int, default=None,
                    help="layers of the large model (default: as many of 16 as the card's memory holds)")
    ap.add_argument("--peak-tflops", type=positive_float, default=None,
                    help="the card's bf16 dense peak (default: from its name)")
    ap.add_argument("--sides", type=sides, default=["kiln", "jax"], help="kiln, jax or kiln,jax (default)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="another Kiln config key for every run (and so for the JAX side's spec); repeatable")
    ap.add_argument("--jax-moe", choices=["ragged", "tiled"], default="ragged",
                    help="bench/jax_gpt_oss.py --moe (default ragged: XLA's ragged dot, as Kiln's lowering)")
    ap.add_argument("--out-dir", default=os.path.join("out", "gpu"),
                    help="logs, spec files and weights (default out/gpu)")
    ap.add_argument("--json", default=None, help="the results as JSON (default OUT_DIR/gpu_results.json)")
    ap.add_argument("--dry-run", action="store_true",
                    help="find the GPU, plugin and sizes, print the plan, run nothing")
    a = ap.parse_args(argv)
    for kv in a.set:
        if not re.match(r"^[a-z_0-9]+=.", kv):
            ap.error("--set %s: expected KEY=VALUE" % kv)
    if a.warmup is None:
        a.warmup = min(5, a.steps // 2)
    if a.warmup >= a.steps:
        ap.error("--warmup %d must be below --steps %d" % (a.warmup, a.steps))
    return a


# ------------------------------------------------------------------------------------------
# The machine


def detect_gpu():
    """(name, memory MiB) of GPU 0, or (None, why not)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi not found"
    try:
        r = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "nvidia-smi did not answer: %s" % str(e).splitlines()[0]
    lines = [line.strip() for line in r.stdout.splitlines() if line.strip()]
    if r.returncode != 0:
        said = (lines or [line.strip() for line in r.stderr.splitlines() if line.strip()] or ["no output"])[0]
        return None, "nvidia-smi exit %d: %s" % (r.returncode, said[:160])
    if not lines:
        return None, "nvidia-smi lists no GPU"
    name, _, mem = lines[0].rpartition(",")
    try:
        return (name.strip(), float(mem)), None
    except ValueError:
        return None, "nvidia-smi said %r" % lines[0][:160]


def card_peak(name, configs_dir):
    """(bf16 dense TFLOP/s, where it comes from) for a card name, or (None, why)."""
    for key, target, value in CARDS:
        if key.lower() in name.lower():
            if value is not None:
                return value, "the %s datasheet" % key
            path = os.path.join(configs_dir, "targets", target)
            try:
                m = re.search(r"^peak_tflops:\s*\n\s+bfloat16:\s*([0-9.]+)", open(path).read(), re.M)
            except OSError:
                m = None
            if m:
                return float(m.group(1)), "configs/targets/%s" % target
    return None, "no bf16 peak known for %r: pass --peak-tflops" % name


def find_kiln(a):
    """The kiln binary: --kiln, else the bundle's (extracted from dist/kiln-gpu.tar.gz when
    only that was carried here), else build/kiln."""
    if a.kiln:
        return a.kiln
    for path in (os.path.join(ROOT, "kiln"), os.path.join(ROOT, "dist", "kiln-gpu", "kiln")):
        if os.access(path, os.X_OK) and os.path.isfile(path):
            return path
    tarball = os.path.join(ROOT, "dist", "kiln-gpu.tar.gz")
    if os.path.isfile(tarball):
        with tarfile.open(tarball) as t:
            if hasattr(tarfile, "data_filter"):
                t.extractall(os.path.join(ROOT, "dist"), filter="data")
            else:
                t.extractall(os.path.join(ROOT, "dist"))
        return os.path.join(ROOT, "dist", "kiln-gpu", "kiln")
    return os.path.join(ROOT, "build", "kiln")


PLUGIN_PROBE = r"""
import importlib.util, os
for m in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
    try:
        s = importlib.util.find_spec(m)
    except Exception:
        continue
    if s is not None and s.origin:
        p = os.path.join(os.path.dirname(s.origin), "xla_cuda_plugin.so")
        if os.path.isfile(p):
            print(p)
            break
"""


def find_plugin(a):
    """(path or None, how it was found or why none was)."""
    if a.plugin:
        return a.plugin, "--plugin"
    env = os.environ.get("KILN_CUDA_PLUGIN", "")
    if env:
        return env, "$KILN_CUDA_PLUGIN"
    try:
        r = subprocess.run([a.python, "-c", PLUGIN_PROBE], capture_output=True, text=True, timeout=60)
        found = r.stdout.strip().splitlines()
        if found:
            return found[-1], "the jax_plugins package of %s" % a.python
    except (OSError, subprocess.TimeoutExpired):
        pass
    venv = os.environ.get("KILN_VENV") or os.path.join(ROOT, ".venv")
    found = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "jax_plugins", "*",
                                          "xla_cuda_plugin.so")))
    if found:
        return found[0], "Kiln's venv %s" % venv
    return None, ("no CUDA PJRT plugin: none in %s's jax_plugins, $KILN_CUDA_PLUGIN unset, none in %s "
                  "(pip install jax-cuda13-pjrt, or pass --plugin)" % (a.python, venv))


def jax_version(python):
    try:
        r = subprocess.run([python, "-c", "import jax, numpy; print(jax.__version__)"], capture_output=True,
                           text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e).splitlines()[0]
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        return None, "no JAX in %s (%s)" % (python, last[:160])
    return r.stdout.strip(), None


# ------------------------------------------------------------------------------------------
# Sizes


def param_count(spec):
    """Parameters of Kiln's GPT-OSS for a spec (src/kiln/models/gpt_oss/params.cc)."""
    d, h, kv, dh = spec["d_model"], spec["heads"], spec["kv_heads"], spec["head_dim"]
    e, f, v = spec["experts"], spec["mlp_dim"], spec["vocab"]
    attention = d * h * dh + h * dh + 2 * (d * kv * dh + kv * dh) + h * dh * d + d + h
    moe = d * e + e + 2 * (e * d * f + e * f) + e * f * d + e * d
    per_layer = attention + moe + 2 * d
    fixed = v * d + d + (0 if spec["tied_embeddings"] else d * v)
    return per_layer, fixed


def large_bytes(spec, layers):
    """Device memory of one step: f32 parameters, both Adam moments and the gradients (16 B a
    parameter), 5% for XLA's temporaries, and 2 GiB for activations (remat full) and the rest."""
    per_layer, fixed = param_count(spec)
    return 16 * (per_layer * layers + fixed) * 1.05 + 2 * GIB


def large_layers_for(spec, memory_mib):
    """The most layers (even, up to 16) whose step fits the XLA pool of a card with this memory."""
    budget = MEM_FRACTION * memory_mib * (1 << 20)
    for layers in range(LARGE_MAX_LAYERS, 1, -2):
        if large_bytes(spec, layers) <= budget:
            return layers
    return 0


# ------------------------------------------------------------------------------------------
# Running children under a deadline


class MemorySampler:
    """nvidia-smi's largest memory.used of GPU 0 (MiB) while a child runs."""

    def __init__(self):
        self.peak = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            try:
                r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
                                    "0"], capture_output=True, text=True, timeout=10)
                used = float(r.stdout.strip().splitlines()[0])
                self.peak = used if self.peak is None else max(self.peak, used)
            except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
                pass
            self._stop.wait(1.0)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=15)


def run_child(cmd, env, log_path, timeout):
    """Runs cmd (its own process group) with stdout and stderr to log_path; returns
    (exit status or "timeout", seconds, nvidia-smi's peak MiB)."""
    with open(log_path, "w") as log, MemorySampler() as mem:
        log.write("$ %s\n" % " ".join(shlex.quote(c) for c in cmd))
        log.flush()
        start = time.time()
        if timeout < 1:
            return "timeout", 0.0, None
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            log.write("cannot start: %s\n" % e)
            return "cannot start: %s" % e, 0.0, None
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            status = "timeout"
    return status, time.time() - start, mem.peak


def last_error(log_path):
    """The line of a failed run's log that says why (Kiln's "kiln: error: ...", XLA's
    RESOURCE_EXHAUSTED, a Python exception), else its last line."""
    try:
        lines = [line.strip() for line in open(log_path, errors="replace") if line.strip()]
    except OSError:
        return "no log"
    for pattern in (r"kiln: error", r"RESOURCE_EXHAUSTED|[Oo]ut of memory", r"^\w*(Error|Exception)\b"):
        hits = [line for line in lines if re.search(pattern, line)]
        if hits:
            return hits[-1][:240]
    return lines[-1][:240] if lines else "empty log"


def parse_kiln(log_path, metrics_path):
    """Step times and losses (metrics.jsonl, full precision; else the log's step lines), Kiln's
    FLOP count, planned memory and compile time."""
    text = open(log_path, errors="replace").read()
    times, losses = [], []
    if os.path.isfile(metrics_path):
        for line in open(metrics_path):
            try:
                r = json.loads(line)
                times.append(float(r["step_time_s"]))
                losses.append(float(r["loss"]))
            except (ValueError, KeyError):
                continue
    if not times:
        for line in text.splitlines():
            m = re.search(r"completed step: \d+, seconds: ([0-9.]+)", line)
            n = re.search(r", loss: ([0-9.]+)", line)
            if m and n:
                times.append(float(m.group(1)))
                losses.append(float(n.group(1)))
    out = {"times": times, "losses": losses}
    m = re.search(r"per device per step: ([\d.e+-]+) learnable \+ ([\d.e+-]+) attention TFLOPs", text)
    if m:
        out["kiln_tflop_per_step"] = float(m.group(1)) + float(m.group(2))
    m = re.search(r"memory per device: ([\d.]+) GiB planned", text)
    if m:
        out["memory_gib"] = float(m.group(1))
        out["memory_how"] = "Kiln's plan (XLA's compiled peak)"
    m = re.search(r"compile/trace time: [\d.]+ s \(trace ([\d.]+) s, compile ([\d.]+) s, init ([\d.]+) s", text)
    if m:
        out["compile_s"] = float(m.group(1)) + float(m.group(2))
        out["init_s"] = float(m.group(3))
    return out


def parse_jax(log_path, result_path):
    if os.path.isfile(result_path):
        try:
            r = json.load(open(result_path))
            out = {"times": r["times"], "losses": r["losses"], "compile_s": r.get("compile_s"),
                   "info": r.get("info", {})}
            info = out["info"]
            if "peak_bytes_in_use" in info:
                out["memory_gib"] = info["peak_bytes_in_use"] / GIB
                out["memory_how"] = "JAX's peak bytes in use"
            elif "temp_mib" in info and "argument_mib" in info:
                mib = info["argument_mib"] + info.get("output_mib", 0) - info.get("alias_mib", 0) + info["temp_mib"]
                out["memory_gib"] = mib / 1024
                out["memory_how"] = "XLA's compiled plan"
            return out
        except (ValueError, KeyError):
            pass
    times, losses = [], []
    for line in open(log_path, errors="replace"):
        m = re.match(r"step (\d+): ([0-9.]+) s, loss ([0-9.eE+-]+|nan|inf)", line.strip())
        if m:
            times.append(float(m.group(2)))
            losses.append(float(m.group(3)))
    return {"times": times, "losses": losses}


def summarise(entry, peak, warmup):
    """Median step time (steps warmup.. of those finished), tokens/s, TFLOP/s and MFU."""
    times = entry.get("times") or []
    if not times:
        return
    kept = times[warmup:] if len(times) > warmup else times
    med = statistics.median(kept)
    entry["steps_done"] = len(times)
    entry["median_s"] = med
    entry["median_of"] = "steps %d-%d" % (len(times) - len(kept), len(times) - 1)
    if med > 0:
        entry["tokens_per_s"] = entry["tokens"] / med
        entry["tflops"] = entry["tflop_per_step"] / med
        entry["mfu"] = entry["tflops"] / peak if peak else None
    entry["loss0"] = entry["losses"][0] if entry.get("losses") else None


# ------------------------------------------------------------------------------------------
# Report


def fmt(x, spec):
    return "—" if x is None else spec % x


def table(results):
    head = ("| model | side | steps | step (s) | tokens/s | TFLOP/s | MFU | memory (GiB) | nvidia-smi peak (GiB) "
            "| compile (s) | loss, step 0 | note |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in results:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r["side"], r.get("steps_done", 0), fmt(r.get("median_s"), "%.4f"),
            fmt(r.get("tokens_per_s"), "%.0f"), fmt(r.get("tflops"), "%.1f"),
            fmt(None if r.get("mfu") is None else 100 * r["mfu"], "%.1f%%"), fmt(r.get("memory_gib"), "%.1f"),
            fmt(None if r.get("smi_peak_mib") is None else r["smi_peak_mib"] / 1024, "%.1f"),
            fmt(r.get("compile_s"), "%.1f"), fmt(r.get("loss0"), "%.4f"), r.get("note", "").replace("|", "/")))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# The runs


class Clock:
    """The deadline, and each run's timeout: what is left less the time the runs after it
    need at least (FLOOR_S each), so a run is cut only when later ones would be starved; and
    never below its weight's share of what is left (for short limits)."""

    FLOOR_S = {"small": 60.0, "large": 120.0}

    def __init__(self, limit):
        self.deadline = time.time() + limit
        self.reserve = min(10.0, 0.05 * limit)  # for the table at the end

    def left(self):
        return self.deadline - time.time() - self.reserve

    def timeout(self, weight, later):
        """later: [(model, weight)] of the runs still to come after this one."""
        left = self.left()
        share = left * weight / (weight + sum(w for _, w in later))
        return max(0.0, share, left - sum(self.FLOOR_S[m] for m, _ in later))


def child_env(work):
    env = dict(os.environ)
    env.update({"KILN_CONFIGS_DIR": os.path.join(ROOT, "configs"), "KILN_CACHE_DIR": os.path.join(work, "cache"),
                "KILN_PROGRESS": "off", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "0",
                "XLA_PYTHON_CLIENT_MEM_FRACTION": str(MEM_FRACTION)})
    return env


def join_notes(*notes):
    return "; ".join(n for n in notes if n)


class Session:
    """One make gpu: the machine's facts, the plans of the models, the runs and their results."""

    def __init__(self, a, gpu, pc):
        self.a, self.pc = a, pc
        self.name, self.memory_mib = gpu
        self.configs_dir = os.path.join(ROOT, "configs")
        self.peak, self.peak_how = ((a.peak_tflops, "--peak-tflops") if a.peak_tflops
                                    else card_peak(self.name, self.configs_dir))
        plugin, self.plugin_how = find_plugin(a) if "kiln" in a.sides else (None, "not needed")
        if plugin is not None and not os.path.isfile(plugin):
            plugin, self.plugin_how = None, "%s names %s, which does not exist" % (self.plugin_how, plugin)
        self.plugin = os.path.abspath(plugin) if plugin else None
        self.jax, self.jax_why = jax_version(a.python) if "jax" in a.sides else (None, "not asked for")
        self.work = os.path.abspath(a.out_dir)
        self.env = child_env(self.work)
        self.models = ["small", "large"] if a.model == "both" else [a.model]
        self.plans = {}
        self.results = []
        self.weights = {}  # model -> Kiln's saved, perturbed initial weights (a checkpoint step directory)

    # -- plans

    def resolve(self, model, shape):
        """The plan of a model from its Kiln keys: the spec the JAX side builds, FLOPs, tokens."""
        spec = self.pc.model_spec(self.pc.resolved_config(self.a.kiln, shape + ["steps=%d" % self.a.steps] + COMMON))
        learnable, attention = self.pc.maxtext_tflops_per_step(spec)
        per_layer, fixed = param_count(spec)
        plan = self.plans.setdefault(model, {"note": ""})
        plan.update({"shape": shape, "spec": spec, "tflop_per_step": learnable + attention,
                     "tokens": spec["batch"] * spec["seq_len"], "params": per_layer * spec["layers"] + fixed})
        return plan

    def plan(self, model):
        if model == "small":
            self.resolve(model, list(SMALL) + self.a.set)
            return
        shape = [os.path.join(self.configs_dir, LARGE_FILE)] + LARGE + self.a.set
        spec = self.resolve(model, shape)["spec"]
        layers = self.a.large_layers or large_layers_for(spec, self.memory_mib)
        if layers == 0:
            self.plans[model]["note"] = "skipped: %.0f GiB hold no 2-layer model" % (self.memory_mib / 1024)
            return
        if not self.a.large_layers and layers < spec["layers"]:
            self.plans[model]["note"] = "%d of %d layers fit %.0f%% of %.0f GiB" % (
                layers, spec["layers"], 100 * MEM_FRACTION, self.memory_mib / 1024)
        self.resolve(model, shape + ["base_num_decoder_layers=%d" % layers])

    def print_plan(self):
        print("%s: %s (%.0f MiB), bf16 dense peak %s TFLOP/s (%s)" % (PROG, self.name, self.memory_mib,
                                                                     fmt(self.peak, "%g"), self.peak_how))
        print("%s: kiln %s; CUDA plugin %s (%s); JAX %s" % (PROG, self.a.kiln, self.plugin or "none", self.plugin_how,
                                                          self.jax or "none (%s)" % self.jax_why))
        for model, p in self.plans.items():
            s = p["spec"]
            print("%s: %s: %d layers, d %d, %d experts top-%d of width %d, vocab %d, batch %d x %d, %.3f B parameters,"
                  " %.4f TFLOP per step (MaxText's formula)%s" % (
                      PROG, model, s["layers"], s["d_model"], s["experts"], s["top_k"], s["mlp_dim"], s["vocab"],
                      s["batch"], s["seq_len"], p["params"] / 1e9, p["tflop_per_step"],
                      "; " + p["note"] if p["note"] else ""))

    # -- runs

    def todo(self):
        """[(model, side, weight)] in order: small before large, Kiln's 0-step run first."""
        runs = []
        for model in self.models:
            if self.plans[model]["note"].startswith("skipped"):
                continue
            if model == "small" and "kiln" in self.a.sides and self.plugin:
                runs.append((model, "init", 1))
            runs += [(model, side, 1 if model == "small" else 3) for side in ("kiln", "jax") if side in self.a.sides]
        return runs

    def kiln_cmd(self, model, run_dir, run_name, extra):
        # Kiln needs a positive peak on an accelerator; the table leaves MFU out when it is unknown.
        return [self.a.kiln, "train"] + self.plans[model]["shape"] + COMMON + [
            "steps=%d" % self.a.steps, "backend=pjrt", "pjrt_plugin=" + self.plugin,
            "hardware_peak_tflops=%g" % (self.peak or 1000.0), "base_output_directory=" + run_dir,
            "run_name=" + run_name] + list(extra)

    def run_init(self, model, run_dir, log, timeout):
        """Kiln's initial weights for the JAX side: a 0-step run saves them; the constant
        tensors are perturbed so every term counts (bench/peers.py)."""
        cmd = self.kiln_cmd(model, run_dir, "init", ["steps=0", "enable_checkpointing=true",
                                                     "async_checkpointing=false"])
        status, wall, _ = run_child(cmd, self.env, log, timeout)
        ckpt = os.path.join(run_dir, "init", "checkpoints", "0")
        if status == 0 and os.path.isdir(ckpt):
            dst = os.path.join(self.work, model, "weights", "0")
            shutil.rmtree(os.path.dirname(dst), ignore_errors=True)
            self.pc.perturb_checkpoint(ckpt, dst)
            self.weights[model] = dst
            print("%s: %s: Kiln's initial weights saved and perturbed in %.0f s" % (PROG, model, wall), flush=True)
        else:
            print("%s: %s: Kiln's 0-step run %s; JAX draws its own weights" % (
                PROG, model, "timed out after %.0f s" % wall if status == "timeout" else "failed (%s): %s" % (
                    status, last_error(log))), flush=True)

    def run_kiln(self, model, entry, run_dir, log, timeout, retry_timeout):
        extra = ["enable_checkpointing=false"]
        if model in self.weights:
            extra.append("load_parameters_path=" + self.weights[model])
        status, wall, smi = run_child(self.kiln_cmd(model, run_dir, "kiln", extra), self.env, log, timeout)
        p = self.plans[model]
        if (model == "large" and status != 0 and not self.a.large_layers and p["spec"]["layers"] > 2
                and re.search(r"RESOURCE_EXHAUSTED|[Oo]ut of memory", last_error(log)) and retry_timeout() > 120):
            # The estimate was short of what XLA needs: once more with a quarter fewer layers
            # (the JAX side then trains the same model).
            layers = max(2, (p["spec"]["layers"] * 3 // 4) // 2 * 2)
            print("%s: large kiln: out of memory with %d layers; again with %d" % (PROG, p["spec"]["layers"], layers),
                  flush=True)
            shape = [x for x in p["shape"] if not x.startswith("base_num_decoder_layers=")]
            self.resolve(model, shape + ["base_num_decoder_layers=%d" % layers])
            p["note"] = join_notes(p["note"], "%d layers after an out-of-memory failure" % layers)
            entry.update({"tflop_per_step": p["tflop_per_step"], "note": p["note"]})
            os.replace(log, log + ".oom")
            shutil.rmtree(os.path.join(run_dir, "kiln"), ignore_errors=True)
            status, wall, smi = run_child(self.kiln_cmd(model, run_dir, "kiln", extra), self.env, log,
                                          retry_timeout())
        entry.update(parse_kiln(log, os.path.join(run_dir, "kiln", "metrics.jsonl")))
        k = entry.get("kiln_tflop_per_step")
        if k and abs(k - entry["tflop_per_step"]) > 1e-3 * k:
            entry["note"] = join_notes(entry["note"], "Kiln counts %.4f TFLOP a step, peers_common %.4f" % (
                k, entry["tflop_per_step"]))
        return status, wall, smi

    def run_jax(self, model, entry, run_dir, log, timeout):
        spec_path = os.path.join(run_dir, "spec.json")
        json.dump(self.plans[model]["spec"], open(spec_path, "w"), indent=1)
        result_path = os.path.join(run_dir, "result.json")
        weights = os.path.join(self.weights[model], "shard-0.safetensors") if model in self.weights else "-"
        cmd = [self.a.python, os.path.join(HERE, "jax_gpt_oss.py"), spec_path, weights, result_path, "--dtype",
               "bfloat16", "--moe", self.a.jax_moe, "--steps", str(self.a.steps)] + (
                   ["--remat"] if model == "large" else [])
        status, wall, smi = run_child(cmd, self.env, log, timeout)
        entry.update(parse_jax(log, result_path))
        entry["note"] = join_notes(entry["note"], "own draw of Kiln's initialisers" if weights == "-" else "",
                                   "AdamW in plain JAX (no optax)" if entry.get("info", {}).get("adamw") == "jax"
                                   else "")
        return status, wall, smi

    def run_all(self, clock):
        os.makedirs(self.work, exist_ok=True)
        todo = self.todo()
        for i, (model, side, weight) in enumerate(todo):
            later = [(m, w) for m, _, w in todo[i + 1:]]
            timeout = clock.timeout(weight, later)
            run_dir = os.path.join(self.work, model, side)
            shutil.rmtree(run_dir, ignore_errors=True)
            os.makedirs(run_dir)
            log = os.path.join(run_dir, "log.txt")
            if side == "init":
                self.run_init(model, run_dir, log, timeout)
                continue
            p = self.plans[model]
            entry = {"model": model, "side": side, "tokens": p["tokens"], "tflop_per_step": p["tflop_per_step"],
                     "log": log, "timeout_s": round(timeout, 1), "note": p["note"]}
            self.results.append(entry)
            missing = ("not run: " + self.plugin_how if side == "kiln" and not self.plugin else
                       "not run: " + self.jax_why if side == "jax" and not self.jax else "")
            if missing:
                entry["note"] = missing
                print("%s: %s %s: %s" % (PROG, model, side, missing), flush=True)
                continue
            if side == "kiln":
                status, wall, smi = self.run_kiln(model, entry, run_dir, log, timeout,
                                                  lambda: clock.timeout(weight, later))
            else:
                status, wall, smi = self.run_jax(model, entry, run_dir, log, timeout)
            entry.update({"status": status, "wall_s": round(wall, 1), "smi_peak_mib": smi})
            summarise(entry, self.peak, self.a.warmup)
            if status != 0:
                entry["note"] = join_notes(entry["note"], "timed out after %.0f s" % wall if status == "timeout"
                                           else "failed (%s): %s" % (status, last_error(log)))
            print("%s: %s %s: %s in %.0f s%s" % (
                PROG, model, side, "done" if status == 0 else ("timed out" if status == "timeout" else "failed"),
                wall, ", median step %.4f s, step-0 loss %s" % (entry["median_s"], fmt(entry.get("loss0"), "%.4f"))
                if "median_s" in entry else ""), flush=True)

    # -- report

    def report(self, command, started, json_path):
        for model in self.models:
            pair = sorted((r for r in self.results if r["model"] == model and r.get("loss0") is not None),
                          key=lambda r: r["side"] != "kiln")
            if len(pair) == 2:
                k, j = pair[0]["loss0"], pair[1]["loss0"]
                print("%s: %s step-0 loss kiln %.6f, jax %.6f (relative difference %.1e%s)" % (
                    PROG, model, k, j, abs(k - j) / abs(k), "" if model in self.weights else "; different weights"))
        print()
        print("## Kiln (backend=pjrt, XLA's CUDA plugin) and JAX on %s, %s" % (self.name, time.strftime("%Y-%m-%d")))
        print()
        print("bf16 compute, f32 weights and Adam; median of the steps after the first %d of %d (one reused synthetic "
              "batch); TFLOP/s by MaxText's formula; MFU against %s TFLOP/s (%s); memory: Kiln's is XLA's compiled "
              "plan, JAX's its peak bytes in use; nvidia-smi's peak includes XLA's pool (%.0f%% of the card, "
              "preallocated)." % (self.a.warmup, self.a.steps, fmt(self.peak, "%g"), self.peak_how,
                                  100 * MEM_FRACTION))
        print()
        print(table(self.results))
        print()
        print("reproduce: %s  (total %.0f s of a %.0f s limit; logs and %s)" % (
            command, time.time() - started, self.a.time_limit, json_path))
        json.dump({"gpu": self.name, "memory_mib": self.memory_mib, "peak_tflops": self.peak,
                   "peak_how": self.peak_how, "plugin": self.plugin, "plugin_how": self.plugin_how,
                   "kiln": self.a.kiln, "jax": self.jax, "command": command,
                   "date": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(self.a), "plans": self.plans,
                   "results": self.results}, open(json_path, "w"), indent=1)
        return bool(self.results) and all(r.get("status") == 0 for r in self.results)


def check_kiln(a):
    """A one-line reason why the kiln binary cannot run here, or None."""
    if not (os.path.isfile(a.kiln) and os.access(a.kiln, os.X_OK)):
        return "no kiln binary at %s (make build, or carry dist/kiln-gpu from make gpu-bundle, or pass --kiln)" % a.kiln
    try:
        r = subprocess.run([a.kiln, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "%s does not run here: %s" % (a.kiln, str(e).splitlines()[0])
    if r.returncode != 0:
        # The bundle needs glibc >= 2.36 and GCC 12's libstdc++ (docs/backends.md, "On a GPU").
        said = (r.stderr.strip() or r.stdout.strip() or "exit %d" % r.returncode).splitlines()[-1]
        return "%s does not run here: %s" % (a.kiln, said[:240])
    return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    gpu, why = detect_gpu()
    if gpu is None:
        print("%s: no NVIDIA GPU on this machine (%s); nothing to run" % (PROG, why))
        return 0
    started = time.time()
    clock = Clock(a.time_limit)
    if os.path.isfile(os.path.join(ROOT, "configs", "base.yml")):
        os.environ["KILN_CONFIGS_DIR"] = os.path.join(ROOT, "configs")  # the bundle's configs go with its binary
    a.kiln = os.path.abspath(find_kiln(a))
    why = check_kiln(a)
    if why:
        print("%s: error: %s" % (PROG, why), file=sys.stderr)
        return 1 if "does not run here" in why else 2
    if a.plugin and not os.path.isfile(a.plugin):
        print("%s: error: --plugin %s: no such file" % (PROG, a.plugin), file=sys.stderr)
        return 2
    # numpy from here on: JAX brings it (and this repository's machines have it).
    sys.path.insert(0, HERE)
    import peers_common as pc  # noqa: E402

    session = Session(a, gpu, pc)
    for model in session.models:
        try:
            session.plan(model)
        except (subprocess.CalledProcessError, OSError, KeyError, ValueError, SystemExit) as e:
            print("%s: error: `%s config` failed for %s: %s" % (PROG, a.kiln, model, str(e).splitlines()[0]),
                  file=sys.stderr)
            return 2
    session.print_plan()
    if a.dry_run:
        print("%s: dry run: %d steps per run (median after %d), time limit %.0f s, sides %s, out %s" % (
            PROG, a.steps, a.warmup, a.time_limit, ",".join(a.sides), session.work))
        return 0
    session.run_all(clock)
    command = " ".join(["python3 bench/gpu_run.py"] + [shlex.quote(x) for x in argv])
    ok = session.report(command, started, a.json or os.path.join(session.work, "gpu_results.json"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
