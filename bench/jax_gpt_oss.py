#!/usr/bin/env python3
"""JAX/XLA side of bench/peers.py: GPT-OSS written the way MaxText writes it (its parameter
names and layouts, its mixed precision, its dropless sorted MoE, the whole training step
under one jax.jit with optax.adamw), trained on Kiln's synthetic batch from Kiln's initial
weights (read from a Kiln checkpoint through safetensors), in its own process.

MaxText itself is not on PyPI, so this is a faithful re-implementation of its GPT-OSS
decoder (src/maxtext/models/gpt_oss.py and the layers it calls; spec: shared/spec/
gpt-oss-maxtext.md §1.2-1.6):
  - token embedding (no scaling), L x [RMSNorm -> attention -> residual -> RMSNorm -> MoE
    -> residual], RMSNorm, unembedding (logits_dense, or the embedding when tied), f32
    logits, mean cross-entropy over non-padding targets;
  - attention: q/k/v/o with biases, YaRN RoPE (half-split, cos/sin scaled), GQA (query
    head h reads kv head h // (H/KV)), scale 1/sqrt(head_dim), causal mask, a 128-token
    sliding window on even layers, per-head sink logits appended as an extra softmax
    column and dropped after it (MaxText's dot-product path: the CPU one);
  - MoE: router linear with bias, top-k on the raw logits, softmax over the k picked
    (f32), experts wi_0 (gate) / wi_1 (up) / wo with biases, gate clamped above at the
    limit, up clamped to +-limit, gate * sigmoid(1.702 gate) * (up + 1), weighted sum in
    f32 (float32_weight_sum), dropless.
The MoE dispatch, `--moe`:
  tiled   (default) MaxText's sparse_matmul path as its megablox GMM kernel computes it:
          the (token, slot) pairs sorted by expert (a permutation with a custom VJP that
          is the inverse permutation, as MaxText's use_custom_sort_vjp), each expert's
          group padded to a multiple of a row tile, one batched GEMM over the tiles with
          each tile's expert's weights. FLOPs: the routed rows plus up to E tiles of
          padding (--tile; auto: 64 rows, less if the padding would pass 1/4 of the rows).
  ragged  jax.lax.ragged_dot, which MaxText calls with megablox=false. XLA:CPU has no
          ragged kernel: JAX lowers it to a masked dense product with num_experts times
          the FLOPs. This is what MaxText itself would run on a CPU.
Mixed precision (dtype=bfloat16, MaxText's and Kiln's): f32 parameters, gradients and
optimizer state; weights cast to bf16 where they are used; bf16 activations and matmul
operands; f32 RMSNorm statistics, attention logits and softmax, router logits and routing
weights, weighted expert sum, logits and loss.
Optimizer: optax.chain(clip_by_global_norm, adamw(schedule, b1, b2, eps, weight_decay)) as
MaxText builds it, with Kiln's learning-rate schedule (a table indexed by optax's count).
Layers are unrolled (no lax.scan: MaxText's scan_layers=true trades speed for compile time
on large models; for 4-8 layers on a CPU the unrolled program is the tuned choice; --scan
is not offered). No rematerialisation (remat_policy=none on every side of the bench).

For `make gpu` (bench/gpu_run.py, on a GPU machine's own Python, which may lack optax and
safetensors and reaches no registry): without optax the same chain runs as plain JAX
(`--adamw jax`: the same state and arithmetic; `auto` picks optax when it imports, and the
result says which ran); safetensors is optional already (peers_common reads the format by
hand); WEIGHTS `-` draws Kiln's initialisers with JAX's generator instead of reading a Kiln
checkpoint (`--init-seed`: for a model whose checkpoint would be too big to write and read in
a short GPU session; the step-0 loss is then that of other weights from the same
distributions); `--remat` recomputes each layer in the backward pass (jax.checkpoint saving
nothing: Kiln's remat_policy=full); the result carries the device's peak memory in use
where the backend reports it.

Usage (peers.py runs it): python bench/jax_gpt_oss.py SPEC.json WEIGHTS.safetensors OUT.json
    [--dtype float32|bfloat16] [--moe tiled|ragged] [--tile N] [--steps N]
    [--adamw auto|optax|jax] [--init-seed N] [--remat]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers_common as pc  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
try:
    import optax  # noqa: E402
except ImportError:  # make gpu's GPU image may lack it: jax_adamw below is the same chain
    optax = None

F32 = jnp.float32


# ------------------------------------------------------------------------------------------
# Row permutations with an inverse-permutation VJP (MaxText's use_custom_sort_vjp)


@jax.custom_vjp
def gather_rows(x, fwd, bwd):
    """out[i] = x[fwd[i]] (0 where fwd[i] == len(x)); `bwd` is the inverse map: x's row j
    lands in out row bwd[j] (len(out) where it lands nowhere). Injective, so the VJP is the
    gather by `bwd`, not a scatter-add."""
    return jnp.take(x, fwd, axis=0, mode="fill", fill_value=0)


def _gather_rows_fwd(x, fwd, bwd):
    return gather_rows(x, fwd, bwd), (fwd, bwd)


def _gather_rows_bwd(res, g):
    fwd, bwd = res
    return jnp.take(g, bwd, axis=0, mode="fill", fill_value=0), None, None


gather_rows.defvjp(_gather_rows_fwd, _gather_rows_bwd)


# ------------------------------------------------------------------------------------------
# The model


def rms_norm(x, scale, eps, dtype):
    # MaxText's RMSNorm: normalise in f32, cast to dtype, then multiply by the scale in dtype.
    xf = x.astype(F32)
    y = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)).astype(dtype)
    return y * scale.astype(dtype)


def rope(x, cos, sin):
    # Half-split rotation: [a, b] -> [a cos - b sin, b cos + a sin]; x [B, T, heads, Dh].
    half = x.shape[-1] // 2
    a, b = x[..., :half].astype(F32), x[..., half:].astype(F32)
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return jnp.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def attention(spec, p, prefix, x, cos, sin, mask, dtype):
    h, kv, dh = spec["heads"], spec["kv_heads"], spec["head_dim"]
    g = h // kv
    bsz, t, _ = x.shape

    def proj(name):
        return (jnp.einsum("btd,dhk->bthk", x, p[prefix + name + ".kernel"].astype(dtype))
                + p[prefix + name + ".bias"].astype(dtype))

    q = rope(proj("query"), cos, sin).astype(dtype).reshape(bsz, t, kv, g, dh)  # [B, T, KV, G, Dh]
    k = rope(proj("key"), cos, sin).astype(dtype)  # [B, S, KV, Dh]
    v = proj("value")
    logits = jnp.einsum("btngd,bsnd->bngts", q, k, preferred_element_type=F32) * dh ** -0.5  # [B, KV, G, T, S]
    logits = jnp.where(mask[:, None, None], logits, -1e30)
    sinks = jnp.broadcast_to(p[prefix + "sinks"].astype(F32).reshape(1, kv, g, 1, 1), (bsz, kv, g, t, 1))
    probs = jax.nn.softmax(jnp.concatenate([logits, sinks], axis=-1), axis=-1)[..., :-1]
    o = jnp.einsum("bngts,bsnd->btngd", probs.astype(dtype), v).reshape(bsz, t, h, dh)
    return (jnp.einsum("bthk,hkd->btd", o, p[prefix + "out.kernel"].astype(dtype))
            + p[prefix + "out.bias"].astype(dtype))


def auto_tile(rows, experts):
    """The largest power-of-two row tile (<= 64) whose worst-case padding, experts x
    (tile - 1) rows, is at most 1/4 of the routed rows. Measured on gpt-oss-small (2048
    routed rows, f32, 2 threads): tile 32 2.03 s, 64 1.62 s, 128 1.61 s per step (fewer,
    larger GEMMs and fewer weight copies outweigh the padding); on the moe shape 64 and 128
    were equal."""
    tile = 64
    while tile > 8 and experts * (tile - 1) > rows // 4:
        tile //= 2
    return tile


def expert_ffn(spec, h0, h1):
    limit = spec["swiglu_limit"]
    gate = jnp.minimum(h0, limit)
    up = jnp.clip(h1, -limit, limit)
    return gate * jax.nn.sigmoid(gate * 1.702) * (up + 1)


def moe(spec, p, prefix, x, dtype, impl, tile):
    bsz, t, d = x.shape
    e, k = spec["experts"], spec["top_k"]
    n = bsz * t
    a = n * k
    u = x.reshape(n, d)
    router = (jnp.einsum("nd,de->ne", u, p[prefix + "gate.kernel"].astype(dtype), preferred_element_type=F32)
              + p[prefix + "gate.bias"])
    values, index = jax.lax.top_k(router, k)
    weights = jax.nn.softmax(values, axis=-1)  # f32 [N, k]
    flat = index.reshape(a)  # expert of pair (token i, slot j) at i * k + j
    order = jnp.argsort(flat, stable=True)
    sorted_expert = flat[order]
    counts = jnp.bincount(flat, length=e)
    w0, w1, wo = (p[prefix + name].astype(dtype) for name in ("wi_0", "wi_1", "wo"))
    b0, b1, bo = (p[prefix + name].astype(dtype) for name in ("wi_0_bias", "wi_1_bias", "wo_bias"))
    inverse = jnp.argsort(order)  # sorted position of each pair
    u_pairs = jnp.repeat(u, k, axis=0)  # [A, D]

    if impl == "ragged":
        xs = gather_rows(u_pairs, order, inverse)  # sorted by expert
        h0 = jax.lax.ragged_dot(xs, w0, counts) + b0[sorted_expert]
        h1 = jax.lax.ragged_dot(xs, w1, counts) + b1[sorted_expert]
        act = expert_ffn(spec, h0, h1).astype(dtype)
        ys = jax.lax.ragged_dot(act, wo, counts) + bo[sorted_expert]
        y = gather_rows(ys, inverse, order)  # back to pair order
    else:
        padded = ((counts + tile - 1) // tile) * tile
        padded_end = jnp.cumsum(padded)
        padded_start = padded_end - padded
        group_start = jnp.cumsum(counts) - counts
        slots = ((a + e * (tile - 1)) + tile - 1) // tile * tile  # static worst case
        num_tiles = slots // tile
        pos_sorted = padded_start[sorted_expert] + (jnp.arange(a) - group_start[sorted_expert])
        pos = pos_sorted[inverse]  # padded slot of each pair
        src = jnp.full((slots,), a, jnp.int32).at[pos].set(jnp.arange(a, dtype=jnp.int32))  # pair in each slot
        tile_expert = jnp.minimum(jnp.searchsorted(padded_end, jnp.arange(num_tiles) * tile, side="right"), e - 1)
        xt = gather_rows(u_pairs, src, pos).reshape(num_tiles, tile, d)
        h0 = jnp.einsum("xrd,xdi->xri", xt, jnp.take(w0, tile_expert, axis=0)) + b0[tile_expert][:, None]
        h1 = jnp.einsum("xrd,xdi->xri", xt, jnp.take(w1, tile_expert, axis=0)) + b1[tile_expert][:, None]
        act = expert_ffn(spec, h0, h1).astype(dtype)
        yt = jnp.einsum("xri,xid->xrd", act, jnp.take(wo, tile_expert, axis=0)) + bo[tile_expert][:, None]
        y = gather_rows(yt.reshape(slots, d), pos, src)  # [A, D] in pair order
    out = jnp.sum(y.astype(F32).reshape(n, k, d) * weights[..., None], axis=1)
    return out.astype(dtype).reshape(bsz, t, d)


def loss_fn(spec, dtype, impl, tile, p, batch, remat=False):
    inputs, targets = batch["inputs"], batch["targets"]
    positions, seg = batch["positions"], batch["segmentation"]
    bsz, t = inputs.shape
    inv_freq, scale = pc.yarn_inv_freq(spec)
    angles = positions.astype(F32)[..., None] * jnp.asarray(inv_freq, F32)
    cos, sin = jnp.cos(angles) * scale, jnp.sin(angles) * scale  # [B, T, Dh/2] f32
    i = jnp.arange(t)[:, None]
    j = jnp.arange(t)[None, :]
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0)
    causal = (j <= i)[None] & same
    sliding = causal & (j > i - spec["sliding_window"])[None]

    def block(x, lp, layer, cos, sin, mask):
        # One decoder layer; lp holds its parameters (full names).
        pre = "layers.%d." % layer
        h = rms_norm(x, lp[pre + "pre_self_attention_layer_norm.scale"], spec["eps"], dtype)
        x = x + attention(spec, lp, pre + "self_attention.", h, cos, sin, mask, dtype)
        h = rms_norm(x, lp[pre + "post_self_attention_layer_norm.scale"], spec["eps"], dtype)
        return x + moe(spec, lp, pre + "mlp.", h, dtype, impl, tile)

    if remat:
        # Kiln's remat_policy=full: only each layer's input is kept; the backward pass runs the
        # layer again.
        block = jax.checkpoint(block, static_argnums=(2,), policy=jax.checkpoint_policies.nothing_saveable)
    x = jnp.take(p["token_embedder.embedding"], inputs, axis=0).astype(dtype)
    for layer in range(spec["layers"]):
        pre = "layers.%d." % layer
        mask = sliding if pc.layer_is_sliding(spec, layer) else causal
        x = block(x, {n: v for n, v in p.items() if n.startswith(pre)}, layer, cos, sin, mask)
    x = rms_norm(x, p["decoder_norm.scale"], spec["eps"], dtype)
    if spec["tied_embeddings"]:
        logits = jnp.einsum("btd,vd->btv", x, p["token_embedder.embedding"].astype(dtype), preferred_element_type=F32)
    else:
        logits = jnp.einsum("btd,dv->btv", x, p["logits_dense.kernel"].astype(dtype), preferred_element_type=F32)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    target = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    weights = (seg != 0).astype(F32)
    return jnp.sum((log_z - target) * weights) / jnp.sum(weights)


# ------------------------------------------------------------------------------------------
# Without optax, and without a Kiln checkpoint (make gpu)


def jax_adamw(spec, learning_rate):
    """optax.chain(clip_by_global_norm(clip), adamw(learning_rate, b1, b2, eps, eps_root=0,
    weight_decay)) written in JAX, for an interpreter without optax: the same state (the
    moments and the counts) and the same arithmetic, step for step (optax 0.2.8's
    clip_by_global_norm, scale_by_adam, add_decayed_weights, scale_by_learning_rate and
    apply_updates). Returns (init, update, apply) like optax's pieces."""
    b1, b2, eps, wd, clip = spec["adam_b1"], spec["adam_b2"], spec["adam_eps"], spec["adam_weight_decay"], spec["clip"]
    tree_map = jax.tree_util.tree_map

    def init(params):
        return {"count": jnp.zeros([], jnp.int32), "mu": tree_map(jnp.zeros_like, params),
                "nu": tree_map(jnp.zeros_like, params), "schedule_count": jnp.zeros([], jnp.int32)}

    def update(grads, state, params):
        g_norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree_util.tree_leaves(grads)))
        grads = tree_map(lambda g: jnp.where(g_norm < clip, g, (g / g_norm.astype(g.dtype)) * clip), grads)
        mu = tree_map(lambda m, g: (1 - b1) * g + b1 * m, state["mu"], grads)
        nu = tree_map(lambda v, g: (1 - b2) * jnp.square(g) + b2 * v, state["nu"], grads)
        count = state["count"] + 1
        mu_hat = tree_map(lambda m: m / (1 - b1 ** count).astype(m.dtype), mu)
        nu_hat = tree_map(lambda v: v / (1 - b2 ** count).astype(v.dtype), nu)
        updates = tree_map(lambda m, v: m / (jnp.sqrt(v) + eps), mu_hat, nu_hat)
        updates = tree_map(lambda u, p: u + wd * p, updates, params)
        step_size = -1 * learning_rate(state["schedule_count"])
        updates = tree_map(lambda u: jnp.array(step_size, dtype=u.dtype) * u, updates)
        return updates, {"count": count, "mu": mu, "nu": nu, "schedule_count": state["schedule_count"] + 1}

    def apply(params, updates):
        return tree_map(lambda p, u: jnp.asarray(p + u).astype(jnp.asarray(p).dtype), params, updates)

    return init, update, apply


def param_shapes(spec):
    """{name: (shape, initialiser)} of Kiln's GPT-OSS parameters (src/kiln/models/gpt_oss/params.cc):
    initialiser ("normal", std), ("fan_in", n), "zeros" or "ones"."""
    d, h, kv, dh = spec["d_model"], spec["heads"], spec["kv_heads"], spec["head_dim"]
    e, f, v = spec["experts"], spec["mlp_dim"], spec["vocab"]
    out = {"token_embedder.embedding": ((v, d), ("normal", (1.0 / d) ** 0.5))}
    for layer in range(spec["layers"]):
        a, m = "layers.%d.self_attention." % layer, "layers.%d.mlp." % layer
        out["layers.%d.pre_self_attention_layer_norm.scale" % layer] = ((d,), "ones")
        out["layers.%d.post_self_attention_layer_norm.scale" % layer] = ((d,), "ones")
        out[a + "query.kernel"], out[a + "query.bias"] = ((d, h, dh), ("fan_in", d)), ((h, dh), "zeros")
        for name in ("key", "value"):
            out[a + name + ".kernel"], out[a + name + ".bias"] = ((d, kv, dh), ("fan_in", d)), ((kv, dh), "zeros")
        out[a + "out.kernel"], out[a + "out.bias"] = ((h, dh, d), ("fan_in", h * dh)), ((d,), "zeros")
        out[a + "sinks"] = ((h,), "zeros")
        out[m + "gate.kernel"], out[m + "gate.bias"] = ((d, e), ("fan_in", d)), ((e,), "zeros")
        for name in ("wi_0", "wi_1"):
            out[m + name], out[m + name + "_bias"] = ((e, d, f), ("fan_in", d)), ((e, f), "zeros")
        out[m + "wo"], out[m + "wo_bias"] = ((e, f, d), ("fan_in", f)), ((e, d), "zeros")
    out["decoder_norm.scale"] = ((d,), "ones")
    if not spec["tied_embeddings"]:
        out["logits_dense.kernel"] = ((d, v), ("fan_in", d))
    return out


def own_init(spec, seed):
    """Kiln's initialisers (kernels: truncated normal on [-2, 2] scaled to variance 1 / fan-in;
    the embedding: normal with variance 1 / D; biases and sinks 0, norm scales 1) drawn with
    JAX's generator, on the device: other values than Kiln's, from the same distributions."""
    def draw(key):  # one program for all of them
        params = {}
        for i, (name, (shape, how)) in enumerate(sorted(param_shapes(spec).items())):
            k = jax.random.fold_in(key, i)
            if how == "zeros":
                params[name] = jnp.zeros(shape, F32)
            elif how == "ones":
                params[name] = jnp.ones(shape, F32)
            elif how[0] == "normal":
                params[name] = jax.random.normal(k, shape, F32) * how[1]
            else:
                std = (1.0 / how[1]) ** 0.5 / 0.87962566103423978
                params[name] = jax.random.truncated_normal(k, -2.0, 2.0, shape, F32) * std
        return params

    return jax.jit(draw)(jax.random.PRNGKey(seed))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("weights")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--moe", default="tiled", choices=["tiled", "ragged"])
    ap.add_argument("--tile", type=int, default=0, help="row tile of the tiled MoE (0: auto)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--adamw", default="auto", choices=["auto", "optax", "jax"],
                    help="optax's AdamW chain, or the same written in JAX (auto: optax when it imports)")
    ap.add_argument("--init-seed", type=int, default=0, help="with WEIGHTS -: the seed of JAX's own draw")
    ap.add_argument("--remat", action="store_true", help="recompute each layer in the backward pass (remat full)")
    a = ap.parse_args()
    if a.adamw == "optax" and optax is None:
        raise SystemExit("jax_gpt_oss: --adamw optax, but optax does not import here")
    adamw = "optax" if a.adamw == "auto" and optax is not None else ("jax" if a.adamw == "auto" else a.adamw)

    spec = json.load(open(a.spec))
    dtype = jnp.bfloat16 if a.dtype == "bfloat16" else F32
    rows = spec["batch"] * spec["seq_len"] * spec["top_k"]
    tile = a.tile or auto_tile(rows, spec["experts"])
    if a.weights == "-":
        params = own_init(spec, a.init_seed)
    else:
        params = {n: jnp.asarray(v, F32) for n, v in pc.read_params(a.weights).items()}
    batch = {k: jnp.asarray(v) for k, v in pc.synthetic_batch(spec).items()}
    lr_table = jnp.asarray(pc.learning_rates(spec, a.steps), F32)
    if adamw == "optax":
        tx = optax.chain(
            optax.clip_by_global_norm(spec["clip"]),
            optax.adamw(lambda count: lr_table[jnp.minimum(count, a.steps - 1)], b1=spec["adam_b1"],
                        b2=spec["adam_b2"], eps=spec["adam_eps"], eps_root=0.0,
                        weight_decay=spec["adam_weight_decay"]))
        tx_init, tx_update, apply_updates = tx.init, tx.update, optax.apply_updates
    else:
        tx_init, tx_update, apply_updates = jax_adamw(spec, lambda count: lr_table[jnp.minimum(count, a.steps - 1)])
    opt_state = tx_init(params)

    def train_step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(lambda q: loss_fn(spec, dtype, a.moe, tile, q, batch, a.remat))(params)
        updates, opt_state = tx_update(grads, opt_state, params)
        return apply_updates(params, updates), opt_state, loss

    start = time.perf_counter()
    lowered = jax.jit(train_step, donate_argnums=(0, 1)).lower(params, opt_state, batch)
    traced = time.perf_counter()
    step = lowered.compile()
    compiled = time.perf_counter()
    info = {"jax": jax.__version__, "moe": a.moe, "tile": tile if a.moe == "tiled" else None,
            "trace_s": traced - start, "xla_compile_s": compiled - traced,
            "xla_flags": os.environ.get("XLA_FLAGS", ""), "ld_preload": os.environ.get("LD_PRELOAD", ""),
            "devices": str(jax.devices()), "adamw": adamw, "remat": a.remat,
            "weights": "own draw, seed %d" % a.init_seed if a.weights == "-" else a.weights}
    try:
        mem = step.memory_analysis()
        info["temp_mib"] = round(mem.temp_size_in_bytes / 2**20, 1)
        info["argument_mib"] = round(mem.argument_size_in_bytes / 2**20, 1)
        info["output_mib"] = round(mem.output_size_in_bytes / 2**20, 1)
        info["alias_mib"] = round(mem.alias_size_in_bytes / 2**20, 1)
    except Exception:  # noqa: BLE001 (not every backend reports it)
        pass

    times, losses = [], []
    for s in range(a.steps):
        t0 = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, batch)
        loss = float(jax.block_until_ready(loss))
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        print("step %d: %.3f s, loss %.6f" % (s, times[-1], loss), file=sys.stderr, flush=True)
    try:
        stats = jax.devices()[0].memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            info["peak_bytes_in_use"] = int(stats["peak_bytes_in_use"])
    except Exception:  # noqa: BLE001 (the CPU backend reports none)
        pass
    json.dump({"times": times, "losses": losses, "compile_s": compiled - start,
               "first_step_s": compiled - start + times[0], "info": info}, open(a.out, "w"))


if __name__ == "__main__":
    main()
