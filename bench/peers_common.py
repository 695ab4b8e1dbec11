"""What every side of bench/peers.py shares: the resolved model config, Kiln's synthetic
batch, the learning-rate schedule, the initial weights and MaxText's FLOP count.

Standard library and numpy only, so that Debian's /usr/bin/python3 (PyTorch 1.13, no
`safetensors` package) and the project venv (PyTorch 2, JAX) both import it.
"""
import json
import math
import os
import re
import struct
import subprocess

import numpy as np

# ------------------------------------------------------------------------------------------
# Config


def resolved_config(kiln, overrides):
    """`kiln config KEY=VALUE...` as a flat dict of strings (top-level keys and `derived:`)."""
    text = subprocess.run([kiln, "config"] + list(overrides), check=True, capture_output=True, text=True).stdout
    cfg, derived = {}, False
    for line in text.splitlines():
        if line.startswith("derived:"):
            derived = True
            continue
        m = re.match(r"^(\s*)([a-z_0-9]+):\s*([^#]*)", line)
        if not m:
            continue
        indent, key, value = m.groups()
        if derived and indent:
            cfg["derived." + key] = value.strip().strip('"')
        elif not indent:
            cfg[key] = value.strip().strip('"')
    return cfg


def model_spec(c):
    """Everything a peer needs to build the same model and training step, from a resolved
    config (ints and floats; JSON-serialisable, passed to the workers as a file)."""
    def num(key):
        return float(c[key].replace("_", ""))

    layers = int(c["derived.num_decoder_layers"])
    spec = {
        "layers": layers,
        "d_model": int(c["derived.emb_dim"]),
        "heads": int(c["derived.num_query_heads"]),
        "kv_heads": int(c["derived.num_kv_heads"]),
        "head_dim": int(c["derived.head_dim"]),
        "experts": int(c["num_experts"]),
        "top_k": int(c["num_experts_per_tok"]),
        "mlp_dim": int(c["derived.moe_mlp_dim"]),
        "vocab": int(c["vocab_size"]),
        "eps": num("normalization_layer_epsilon"),
        "rope_theta": num("rope_max_timescale"),
        "rope_factor": num("rope_factor"),
        "beta_fast": num("beta_fast"),
        "beta_slow": num("beta_slow"),
        "original_max_position_embeddings": int(num("original_max_position_embeddings")),
        "rope_truncate": c["rope_truncate"] == "true",
        "sliding_window": int(c["sliding_window_size"]),
        "swiglu_limit": num("mlp_activations_limit"),
        "tied_embeddings": c["logits_via_embedding"] == "true",
        "batch": int(num("per_device_batch_size")),
        "seq_len": int(c["max_target_length"]),
        "data_shuffle_seed": int(c["data_shuffle_seed"]),
        "adam_b1": num("adam_b1"), "adam_b2": num("adam_b2"), "adam_eps": num("adam_eps"),
        "adam_weight_decay": num("adam_weight_decay"),
        "clip": num("gradient_clipping_threshold"),
        "learning_rate": num("learning_rate"),
        "warmup_steps_fraction": num("warmup_steps_fraction"),
        "learning_rate_final_fraction": num("learning_rate_final_fraction"),
        "steps": int(c["derived.steps"]),
        "schedule_steps": int(c["derived.learning_rate_schedule_steps"]),
    }
    # What these peers implement; anything else would be a different model.
    checks = {"decoder_block": "gpt_oss", "attention_sink": "true", "attention_bias": "true", "mlp_bias": "true",
              "routed_bias": "true", "rope_type": "yarn", "rope_interleave": "false", "rope_attention_scaling": "true",
              "norm_topk_prob": "false", "lr_schedule_type": "cosine", "load_balance_loss_weight": "0.0",
              "z_loss_multiplier": "0.0", "capacity_factor": "-1.0", "gradient_accumulation_steps": "1",
              "adam_eps_root": "0.0", "adamw_mask": "[]", "inhomogeneous_layer_cycle_interval": "2"}
    for key, want in checks.items():
        if c.get(key) != want:
            raise SystemExit("peers: %s=%s, but the peers implement only %s=%s" % (key, c.get(key), key, want))
    if c["mlp_activations"].replace(" ", "") != "[sigmoid,linear]":
        raise SystemExit("peers: mlp_activations=%s, the peers implement [sigmoid, linear]" % c["mlp_activations"])
    return spec


def layer_is_sliding(spec, layer):
    """GPT-OSS alternates sliding and full attention, layer 0 sliding (when a window is set)."""
    return spec["sliding_window"] > 0 and layer % 2 == 0


# ------------------------------------------------------------------------------------------
# Kiln's synthetic batch (src/kiln/train/synthetic_data.cc), bit for bit

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64_int(x):
    x = (x + _GOLDEN) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _hash_combine_int(seed, value):
    return seed ^ ((value + _GOLDEN + (seed << 12) + (seed >> 4)) & _M64)


def _mix64_np(x):
    x = x + np.uint64(_GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def synthetic_batch(spec, k=0):
    """Batch number k of dataset_type=synthetic: int32 [B, T] inputs, targets, positions,
    segmentation (reuse_example_batch=1 feeds batch 0 every step)."""
    b, t, vocab = spec["batch"], spec["seq_len"], spec["vocab"]
    stream = _mix64_int(_hash_combine_int(_mix64_int(spec["data_shuffle_seed"]), k))
    i = np.arange(b * (t + 1), dtype=np.uint64)
    s = np.uint64(stream)
    with np.errstate(over="ignore"):
        combined = s ^ (i + np.uint64(_GOLDEN) + (s << np.uint64(12)) + (s >> np.uint64(4)))
        bits = _mix64_np(combined)
    tokens = (bits % np.uint64(vocab)).astype(np.int32).reshape(b, t + 1)
    return {"inputs": np.ascontiguousarray(tokens[:, :-1]), "targets": np.ascontiguousarray(tokens[:, 1:]),
            "positions": np.tile(np.arange(t, dtype=np.int32), (b, 1)),
            "segmentation": np.ones((b, t), dtype=np.int32)}


# ------------------------------------------------------------------------------------------
# Learning-rate schedule (src/kiln/optim/schedule.cc = MaxText's cosine schedule via optax)


def learning_rates(spec, steps):
    """lr(c) for optax counts c = 0 .. steps - 1 (float64; Kiln evaluates it in float32)."""
    peak = spec["learning_rate"]
    final = peak * spec["learning_rate_final_fraction"]
    s_total = spec["schedule_steps"]
    warmup = int(s_total * spec["warmup_steps_fraction"])
    pieces, bounds = [], []
    if warmup > 0:
        pieces.append(("linear", 0.0, peak, warmup - 1))
        bounds.append(warmup)
    if s_total - warmup > 0:
        pieces.append(("cosine", peak, final, s_total - warmup))
        bounds.append(s_total)
    if spec["steps"] - s_total > 0:
        pieces.append(("constant", 0.0, 0.0, 0))
        bounds.append(s_total)
    if not pieces:
        pieces.append(("constant", 0.0, 0.0, 0))
    starts = [0] + bounds[:len(pieces) - 1]
    out = []
    for c in range(steps):
        i = 0
        while i + 1 < len(pieces) and c >= starts[i + 1]:
            i += 1
        kind, init, end, length = pieces[i]
        s = c - starts[i]
        if kind == "constant":
            lr = init
        elif kind == "linear":
            lr = init if length <= 0 else (init - end) * (1.0 - min(max(s, 0), length) / length) + end
        else:
            pct = s / (length - 1) if length > 1 else 1.0
            a = 0.5 * (math.cos(math.pi * pct) + 1.0)
            lr = init * a + end * (1.0 - a)
        out.append(lr)
    return out


# ------------------------------------------------------------------------------------------
# YaRN RoPE (spec §1.4; the same formula as tests/reference/gpt_oss_ref.py)


def yarn_inv_freq(spec):
    """Inverse frequencies [head_dim/2] (float64) and the cos/sin scale."""
    base, dim, factor = spec["rope_theta"], spec["head_dim"], spec["rope_factor"]
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)

    def correction_dim(rotations):
        return (dim * math.log(spec["original_max_position_embeddings"] / (rotations * 2 * math.pi))) / (
            2 * math.log(base))

    low, high = correction_dim(spec["beta_fast"]), correction_dim(spec["beta_slow"])
    if spec["rope_truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    scale = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq, scale


def rope_tables(spec, positions):
    """cos and sin [B, T, head_dim/2] float32 for int positions [B, T] (scale included)."""
    inv_freq, scale = yarn_inv_freq(spec)
    angles = positions.astype(np.float64)[..., None] * inv_freq
    return (np.cos(angles) * scale).astype(np.float32), (np.sin(angles) * scale).astype(np.float32)


# ------------------------------------------------------------------------------------------
# FLOPs: MaxText's formula as Kiln logs it (src/kiln/train/observability/flops.cc, MaxText 2026-02)


def maxtext_tflops_per_step(spec):
    b, t, d = spec["batch"], spec["seq_len"], spec["d_model"]
    h, kv, hd, v = spec["heads"], spec["kv_heads"], spec["head_dim"], spec["vocab"]
    e, k, i, n_layers = spec["experts"], spec["top_k"], spec["mlp_dim"], spec["layers"]
    n_act = 2
    ffn = 2 * b * t * d * e + k * (2 * b * t * i * d * n_act + 2 * b * t * i * d)
    qkv = 2 * b * t * d * (h + 2 * kv) * hd
    proj = 2 * b * t * d * h * hd
    unembed = 2 * b * t * d * v
    learnable = 3 * (n_layers * (ffn + qkv + proj) + unembed)
    full = n_layers // 2 if spec["sliding_window"] > 0 else n_layers
    sliding = n_layers - full
    w = min(spec["sliding_window"] if spec["sliding_window"] > 0 else t, t)
    attention = 3 * (full * 4 * b * t * t * h * hd + sliding * 4 * b * t * w * h * hd) / 2
    return learnable / 1e12, attention / 1e12


# ------------------------------------------------------------------------------------------
# Weights: Kiln checkpoints (safetensors; MaxText names) and the Hugging Face layout

_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U32": np.uint32,
              "U8": np.uint8}


def read_safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    return header, 8 + n


def read_params(path, prefix="params/"):
    """{name without prefix: float32 array} of a Kiln checkpoint shard. Uses the
    `safetensors` package where it is installed (the venv), else reads the format by hand
    (Debian's python3 has no package for it)."""
    try:
        from safetensors.numpy import load_file
        tensors = load_file(path)
    except ImportError:
        header, start = read_safetensors_header(path)
        with open(path, "rb") as f:
            blob = f.read()
        tensors = {}
        for name, info in header.items():
            if name == "__metadata__" or not name.startswith(prefix):
                continue
            begin, end = info["data_offsets"]
            array = np.frombuffer(blob[start + begin:start + end], dtype=np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<"))
            tensors[name] = array.reshape(info["shape"]).copy()
    return {n[len(prefix):]: np.asarray(v) for n, v in tensors.items() if n.startswith(prefix)}


def to_hf(spec, p):
    """Kiln (MaxText) names -> the Hugging Face GPT-OSS layout of tests/reference/gpt_oss_ref.py
    (the mapping of src/kiln/checkpoint/hf_gpt_oss.h)."""
    d, h, kv, hd = spec["d_model"], spec["heads"], spec["kv_heads"], spec["head_dim"]
    e, i = spec["experts"], spec["mlp_dim"]
    w = {"model.embed_tokens.weight": p["token_embedder.embedding"], "model.norm.weight": p["decoder_norm.scale"]}
    w["lm_head.weight"] = (p["token_embedder.embedding"] if spec["tied_embeddings"]
                           else np.ascontiguousarray(p["logits_dense.kernel"].T))
    for layer in range(spec["layers"]):
        k, o = "layers.%d." % layer, "model.layers.%d." % layer
        a = k + "self_attention."
        w[o + "input_layernorm.weight"] = p[k + "pre_self_attention_layer_norm.scale"]
        w[o + "post_attention_layernorm.weight"] = p[k + "post_self_attention_layer_norm.scale"]
        for name, hf, heads in (("query", "q_proj", h), ("key", "k_proj", kv), ("value", "v_proj", kv)):
            w[o + "self_attn.%s.weight" % hf] = np.ascontiguousarray(p[a + name + ".kernel"].reshape(d, heads * hd).T)
            w[o + "self_attn.%s.bias" % hf] = p[a + name + ".bias"].reshape(heads * hd)
        w[o + "self_attn.o_proj.weight"] = np.ascontiguousarray(p[a + "out.kernel"].reshape(h * hd, d).T)
        w[o + "self_attn.o_proj.bias"] = p[a + "out.bias"]
        w[o + "self_attn.sinks"] = p[a + "sinks"]
        m = k + "mlp."
        w[o + "mlp.router.weight"] = np.ascontiguousarray(p[m + "gate.kernel"].T)
        w[o + "mlp.router.bias"] = p[m + "gate.bias"]
        gate_up = np.empty((e, d, 2 * i), np.float32)
        gate_up[..., 0::2], gate_up[..., 1::2] = p[m + "wi_0"], p[m + "wi_1"]
        bias = np.empty((e, 2 * i), np.float32)
        bias[..., 0::2], bias[..., 1::2] = p[m + "wi_0_bias"], p[m + "wi_1_bias"]
        w[o + "mlp.experts.gate_up_proj"], w[o + "mlp.experts.gate_up_proj_bias"] = gate_up, bias
        w[o + "mlp.experts.down_proj"], w[o + "mlp.experts.down_proj_bias"] = p[m + "wo"], p[m + "wo_bias"]
    return w


def _fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & _M64
    return "%016x" % h


def perturb_checkpoint(src_step_dir, dst_step_dir, seed=1234, std=0.1):
    """Copies a one-device Kiln checkpoint, replacing each parameter that Kiln initialises
    to a constant (biases and sinks: 0; norm scales: 1) by that constant plus seeded
    N(0, std) noise, and fixing the manifest's checksums. The initial weights then exercise
    every term of the model (a zero bias would hide a peer that forgot it)."""
    os.makedirs(dst_step_dir, exist_ok=True)
    manifest = json.load(open(os.path.join(src_step_dir, "manifest.json")))
    shard = os.path.join(src_step_dir, "shard-0.safetensors")
    header, start = read_safetensors_header(shard)
    blob = bytearray(open(shard, "rb").read())
    rng = np.random.default_rng(seed)
    changed = 0
    for name in sorted(header):
        if not name.startswith("params/") or header[name]["dtype"] != "F32":
            continue
        begin, end = header[name]["data_offsets"]
        values = np.frombuffer(bytes(blob[start + begin:start + end]), dtype="<f4")
        if values.size == 0 or not np.all(values == values[0]) or values[0] not in (0.0, 1.0):
            continue
        new = (values + rng.normal(0.0, std, values.size)).astype("<f4")
        blob[start + begin:start + end] = new.tobytes()
        pieces = manifest["tensors"][name]["pieces"]
        if len(pieces) != 1:
            raise SystemExit("perturb_checkpoint: %s has %d pieces (expected a one-device checkpoint)" % (name, len(pieces)))
        pieces[0]["fnv1a64"] = _fnv1a64(new.tobytes())
        changed += 1
    with open(os.path.join(dst_step_dir, "shard-0.safetensors"), "wb") as f:
        f.write(blob)
    with open(os.path.join(dst_step_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return changed
