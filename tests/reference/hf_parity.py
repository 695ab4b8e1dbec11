#!/usr/bin/env python3
"""Kiln against Hugging Face transformers' GptOssForCausalLM, both ways (scripts/parity.sh
drives it; docs/parity.md says what is compared and what was measured).

Subcommands:
  tokens OUT.npy --vocab V --batch B --len T --seed S [--hf HF_DIR ...]
      seeded random ids, int32 [B, T]; with --hf, from the first seed whose rows have no
      router near-tie in those models (every top-k gap >= 1e-4)
  check --name NAME --hf HF_DIR --tokens T.npy --logits L.npy --loss LOSS.npy
        [--grads GRADS.safetensors] [--kiln-ckpt STEP_DIR] --results R.jsonl
      loads HF_DIR with GptOssForCausalLM.from_pretrained (float32, eager attention, so the
      sinks are honoured, and eager experts: the per-expert loop), runs it on the tokens with
      labels=ids, and compares with `kiln forward`'s logits, per-token losses and (with
      --grads) its training-step gradient. With --kiln-ckpt the MXFP4 expert weights Kiln
      imported are compared bit for bit with the ones transformers dequantized.
  make HF_DIR --seed S [--mxfp4 --from-hf F32_DIR]
      a small GPT-OSS built in transformers from a GptOssConfig with seeded random weights,
      saved with save_pretrained (f32). --mxfp4: the same model with MXFP4 expert blocks,
      everything else bf16, as the released checkpoints are stored (see mxfp4_pack).
  table R.jsonl
      the summary table; exit 1 when any row failed.

Errors (all relative, so they read the same at any scale):
  logits           max |kiln - hf| / max |hf logit|                          <= 1e-5
  per-token loss   max |kiln - hf| / max |hf per-token loss|                 <= 1e-5
  mean loss        |kiln - hf| / |hf|  (hf: the model's own loss output)     <= 1e-5
  gradient         per parameter: max |kiln - hf| / max |hf|; the worst one  <= 1e-4
Both sides run float32, so what remains is rounding (a few 1e-7 per operation, grown by
depth and by cancellation); a modelling difference (mask, rope, sink, routing, clamp, bias)
moves logits by 1e-3 or more. transformers is also run in float64 (model.double(); its
RMSNorm and rope tables still round through float32) as a tie-breaker: when Kiln and the
float32 run disagree, the float64 column says which side is off.
"""
import argparse
import copy
import json
import os
import sys
import time
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxfp4_ref  # noqa: E402  (the independent numpy MXFP4 dequantizer)

LOGIT_TOL = 1e-5
LOSS_TOL = 1e-5
GRAD_TOL = 1e-4
MARGIN = 1e-4  # smallest router top-k gap the tokens may have (100x the rounding differences)


def rel(a, b):
    """max |a - b| / max |b| in float64."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = np.abs(b).max()
    return float(np.abs(a - b).max() / scale) if scale > 0 else float(np.abs(a - b).max())


# ----------------------------------------------------------------------------- tokens

def router_margin(model, ids):
    """The smallest gap, over every token and layer, between the k-th and (k+1)-th largest
    router logit of transformers' float32 run: top-k is discontinuous there, so a gap
    within rounding reach (1e-6 here) could route a token differently in Kiln."""
    import torch
    k = model.config.num_experts_per_tok
    margin = [float("inf")]

    def hook(_module, _inputs, output):
        top = torch.topk(output[0].detach(), k + 1, dim=-1).values
        margin[0] = min(margin[0], float((top[:, k - 1] - top[:, k]).min()))

    hooks = [layer.mlp.router.register_forward_hook(hook) for layer in model.model.layers]
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    return margin[0]


def cmd_tokens(args):
    """Seeded random ids; with --hf, the first seed from --seed on whose rows route every
    token with a top-k margin of at least MARGIN in each of those models (no near-ties)."""
    models = []
    for seed in range(args.seed, args.seed + 100):
        ids = np.random.default_rng(seed).integers(0, args.vocab, size=(args.batch, args.len)).astype(np.int32)
        if not args.hf:
            break
        import torch
        models = models if seed > args.seed else [load_hf(d) for d in args.hf]
        margin = min(router_margin(m, torch.from_numpy(ids.astype(np.int64))) for m in models)
        if margin >= MARGIN:
            print("tokens: seed %d, smallest router top-k margin %.2e" % (seed, margin))
            break
    else:
        raise SystemExit("tokens: no seed in %d..%d routes without a near-tie" % (args.seed, args.seed + 99))
    np.save(args.out, ids)
    return 0


# ----------------------------------------------------------------------------- make

def small_config(mxfp4):
    """Every GPT-OSS feature, at toy size; the numbers that a mapping could get wrong are not
    transformers' defaults (theta, YaRN factor and betas, truncate, clamp limit, eps)."""
    from transformers import GptOssConfig
    return GptOssConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=64, head_dim=16,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=8, num_experts_per_tok=2,
        sliding_window=8,  # layer_types default: sliding, full, sliding, full
        max_position_embeddings=32768, rms_norm_eps=2e-5, swiglu_limit=2.0,
        # With head_dim 16 the YaRN ramp runs over dims 2.87 .. 5.03: fractional, so truncate
        # (true here, transformers' own default; false in the Kiln -> HF check) matters.
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "beta_fast": 24.0,
                         "beta_slow": 2.0, "truncate": True, "original_max_position_embeddings": 4096},
        tie_word_embeddings=False, attention_bias=True,
        dtype="bfloat16" if mxfp4 else "float32",
    )


def randomize(model, seed):
    """transformers' init (N(0, 0.02), zero biases) makes a near-linear model with tiny
    logits and sinks that barely matter; draw everything at unit scale instead: kernels
    N(0, 1/fan_in), biases N(0, 0.3), sinks N(0, 1), norm scales 1 + N(0, 0.2)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if name.endswith("sinks"):
                v = torch.randn(shape, generator=gen)
            elif "layernorm" in name or name == "model.norm.weight":
                v = 1.0 + 0.2 * torch.randn(shape, generator=gen)
            elif name.endswith("bias"):
                v = 0.3 * torch.randn(shape, generator=gen)
            elif name == "model.embed_tokens.weight":
                v = torch.randn(shape, generator=gen)
            elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                v = torch.randn(shape, generator=gen) / shape[1] ** 0.5  # [E, in, out]
            else:  # nn.Linear weights [out, in]: q/k/v/o, router, lm_head
                v = torch.randn(shape, generator=gen) / shape[1] ** 0.5
            p.copy_(v.to(p.dtype))


def mxfp4_pack(rng, experts, rows, cols):
    """Random MXFP4 blocks and scales for a weight that Hugging Face stores as
    X_blocks [E, rows, cols/32, 16] (two E2M1 codes a byte, low nibble = even element) and
    X_scales [E, rows, cols/32] (E8M0, bias 127): the released GPT-OSS layout, which
    dequantizes (mxfp4_ref.dequantize) to [E, cols, rows]. Drawn as codes, so the weights
    are exactly representable; scales 2^-6 .. 2^-3 give entries of about 1/sqrt(fan-in)."""
    blocks = rng.integers(0, 256, size=(experts, rows, cols // 32, 16), dtype=np.uint8)
    scales = rng.integers(127 - 6, 127 - 2, size=(experts, rows, cols // 32), dtype=np.uint8)
    return blocks, scales


def try_transformers_mxfp4_write(f32_dir, out_dir):
    """transformers writes MXFP4 only from a model it quantized while loading
    (from_pretrained(quantization_config=Mxfp4Config())) and then save_pretrained. Returns
    None when that worked, else the exception, verbatim."""
    import torch
    from transformers import GptOssForCausalLM, Mxfp4Config
    try:
        m = GptOssForCausalLM.from_pretrained(f32_dir, quantization_config=Mxfp4Config(), dtype=torch.bfloat16)
        m.save_pretrained(out_dir)
        with open(os.path.join(out_dir, "config.json")) as f:
            if "quantization_config" not in json.load(f):
                return "save_pretrained wrote no quantization_config"
        return None
    except Exception as e:  # noqa: BLE001 (reported verbatim)
        return "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0])


def cmd_make(args):
    import torch
    from safetensors.torch import save_file
    from transformers import GptOssForCausalLM

    torch.manual_seed(args.seed)
    if not args.mxfp4:
        model = GptOssForCausalLM(small_config(False)).to(torch.float32)
        randomize(model, args.seed)
        model.save_pretrained(args.out)
        print("make: GptOssForCausalLM %d parameters, f32, saved with save_pretrained to %s"
              % (sum(p.numel() for p in model.parameters()), args.out))
        return 0

    # MXFP4: first whether transformers itself can write it.
    reason = try_transformers_mxfp4_write(args.from_hf, args.out) if args.from_hf else "not tried (--from-hf unset)"
    if reason is None:
        print("make: transformers wrote the MXFP4 checkpoint itself (Mxfp4Config + save_pretrained)")
        with open(os.path.join(args.out, "mxfp4_writer.txt"), "w") as f:
            f.write("transformers\n")
        return 0
    print("make: transformers cannot write MXFP4 here: %s" % reason)
    print("make: writing the MXFP4 blocks and scales with the reference packing instead (mxfp4_pack)")
    cfg = small_config(True)
    model = GptOssForCausalLM(cfg).to(torch.float32)
    randomize(model, args.seed)
    rng = np.random.default_rng(args.seed)
    E, D, I = cfg.num_local_experts, cfg.hidden_size, cfg.intermediate_size
    tensors = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("experts.gate_up_proj"):     # [E, D, 2I] <- blocks [E, 2I, D/32, 16]
                blocks, scales = mxfp4_pack(rng, E, 2 * I, D)
            elif name.endswith("experts.down_proj"):      # [E, I, D] <- blocks [E, D, I/32, 16]
                blocks, scales = mxfp4_pack(rng, E, D, I)
            else:
                tensors[name] = p.detach().to(torch.bfloat16).contiguous()
                continue
            tensors[name + "_blocks"] = torch.from_numpy(blocks)
            tensors[name + "_scales"] = torch.from_numpy(scales)
    os.makedirs(args.out, exist_ok=True)
    save_file(tensors, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(args.out)
    path = os.path.join(args.out, "config.json")
    with open(path) as f:
        config = json.load(f)
    # As the released checkpoints' config.json says it.
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"]}
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(args.out, "mxfp4_writer.txt"), "w") as f:
        f.write("reference packing; transformers: %s\n" % reason)
    print("make: MXFP4 experts (%d block tensors), other weights bf16, to %s"
          % (sum(n.endswith("_blocks") for n in tensors), args.out))
    return 0


# ----------------------------------------------------------------------------- check

def load_hf(hf_dir):
    """GptOssForCausalLM in float32 with eager attention (the path that adds the sink
    column; sdpa is not offered for GPT-OSS) and eager experts (the per-expert loop, not
    grouped_mm). A pre-quantized MXFP4 checkpoint is dequantized on load (the only way it
    loads on a CPU without the hub's triton kernels). Any missing, unexpected or misshapen
    tensor is an error: from_pretrained would otherwise initialise it at random."""
    import torch
    from transformers import GptOssForCausalLM, Mxfp4Config
    with open(os.path.join(hf_dir, "config.json")) as f:
        config = json.load(f)
    kwargs = dict(dtype=torch.float32, attn_implementation="eager", experts_implementation="eager",
                  output_loading_info=True)
    if config.get("quantization_config", {}).get("quant_method") == "mxfp4":
        kwargs["quantization_config"] = Mxfp4Config(dequantize=True)
    model, info = GptOssForCausalLM.from_pretrained(hf_dir, **kwargs)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit("from_pretrained(%s): %s" % (hf_dir, problems))
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32, (name, p.dtype)
    return model.eval()  # no dropout (attention_dropout is 0 anyway); autograd stays on


def run_hf(model, ids, instrument=False):
    """logits, per-token loss [B, T] (last position 0), the model's mean loss, gradients
    (name -> array) and, with instrument, coverage facts (router top-k margins, clamps)."""
    import torch
    stats = {"margin": router_margin(model, ids) if instrument else None, "gate_clamped": 0, "up_clamped": 0,
             "gate_values": 0}
    if instrument:
        for layer in model.model.layers:
            experts = layer.mlp.experts
            original = type(experts)._apply_gate

            def counting(self, gate_up, original=original):
                gate, up = gate_up[..., ::2], gate_up[..., 1::2]
                stats["gate_clamped"] += int((gate > self.limit).sum())
                stats["up_clamped"] += int((up.abs() > self.limit).sum())
                stats["gate_values"] += gate.numel()
                return original(self, gate_up)

            experts._apply_gate = types.MethodType(counting, experts)
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    logits = out.logits.detach().double().numpy()
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    nxt = ids.numpy()[:, 1:]
    token_loss = np.zeros(ids.shape, dtype=np.float64)
    token_loss[:, :-1] = -np.take_along_axis(logp[:, :-1], nxt[..., None], -1)[..., 0]
    grads = {n: p.grad.detach().double().numpy() for n, p in model.named_parameters() if p.grad is not None}
    return logits, token_loss, out.loss.item(), grads, stats


def read_grads(path):
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        return {n: f.get_tensor(n).double().numpy() for n in f.keys()}, meta


def cmd_check(args):
    import torch
    torch.manual_seed(0)
    t0 = time.time()
    model = load_hf(args.hf)
    model64 = copy.deepcopy(model).double()
    ids = torch.from_numpy(np.load(args.tokens).astype(np.int64))
    B, T = ids.shape
    logits, token_loss, loss, grads, stats = run_hf(model, ids, instrument=True)
    logits64, token_loss64, _, grads64, _ = run_hf(model64, ids)
    loss64 = token_loss64[:, :-1].mean()  # transformers' loss function casts the logits to float32

    kiln_logits = np.load(args.logits)
    kiln_loss = np.load(args.loss).astype(np.float64)
    if kiln_logits.shape != logits.shape:
        raise SystemExit("logits shape: kiln %s, transformers %s" % (kiln_logits.shape, logits.shape))
    kiln_mean = kiln_loss[:, :-1].mean()
    cfg = model.config
    rows = []

    def row(what, err, tol, err64=None, hf_vs_64=None, note=""):
        rows.append({"check": args.name, "what": what, "err": err, "tol": tol, "ok": bool(err <= tol),
                     "err_vs_f64": err64, "hf32_vs_f64": hf_vs_64, "note": note})

    row("logits", rel(kiln_logits, logits), LOGIT_TOL, rel(kiln_logits, logits64), rel(logits, logits64),
        "max|logit| %.3g" % np.abs(logits).max())
    row("per-token loss", rel(kiln_loss, token_loss), LOSS_TOL, rel(kiln_loss, token_loss64),
        rel(token_loss, token_loss64), "%d tokens" % (B * (T - 1)))
    row("mean loss", rel(kiln_mean, loss), LOSS_TOL, rel(kiln_mean, loss64), rel(loss, loss64),
        "kiln %.7f, hf %.7f" % (kiln_mean, loss))

    if args.grads:
        kg, meta = read_grads(args.grads)
        if set(kg) != set(grads):
            odd = sorted(set(kg) ^ set(grads))
            rows.append({"check": args.name, "what": "gradient names", "err": float(len(odd)), "tol": 0.0,
                         "ok": False, "err_vs_f64": None, "hf32_vs_f64": None,
                         "note": "only kiln %s, only transformers %s" % (sorted(set(kg) - set(grads)),
                                                                         sorted(set(grads) - set(kg)))})
            grads = {n: g for n, g in grads.items() if n in kg}
        diff_loss = float(meta.get("loss", "nan"))
        row("differentiated loss", rel(diff_loss, loss), LOSS_TOL, rel(diff_loss, loss64), rel(loss, loss64),
            "kiln moe_lb_loss %s, z_loss %s" % (meta.get("moe_lb_loss"), meta.get("z_loss")))
        errs = {n: rel(kg[n], grads[n]) for n in grads}
        worst = max(errs, key=errs.get)
        row("gradient (worst of %d)" % len(errs), errs[worst], GRAD_TOL, rel(kg[worst], grads64[worst]),
            rel(grads[worst], grads64[worst]), worst)
        if args.verbose:
            for n in sorted(errs, key=errs.get, reverse=True):
                print("  grad %-55s %.2e (vs f64 %.2e, hf32 vs f64 %.2e)"
                      % (n, errs[n], rel(kg[n], grads64[n]), rel(grads[n], grads64[n])))

    if args.kiln_ckpt:
        # MXFP4: the expert weights Kiln imported vs the ones transformers dequantized, and vs
        # the numpy reference dequantizer (mxfp4_ref.py) applied to the file's blocks.
        from safetensors import safe_open
        with safe_open(os.path.join(args.kiln_ckpt, "shard-0.safetensors"), framework="pt") as f:
            kiln_w = {n: f.get_tensor(n) for n in f.keys()}
        with safe_open(os.path.join(args.hf, "model.safetensors"), framework="pt") as f:
            raw = {n: f.get_tensor(n).numpy() for n in f.keys() if n.endswith(("_blocks", "_scales"))}
        mismatches, checked = 0, 0
        for l in range(cfg.num_hidden_layers):
            experts = model.model.layers[l].mlp.experts
            hf_gu = experts.gate_up_proj.detach().double().numpy()  # [E, D, 2I]
            hf_down = experts.down_proj.detach().double().numpy()   # [E, I, D]
            pre = "model.layers.%d.mlp.experts." % l
            ref_gu = mxfp4_ref.dequantize(raw[pre + "gate_up_proj_blocks"], raw[pre + "gate_up_proj_scales"])
            ref_down = mxfp4_ref.dequantize(raw[pre + "down_proj_blocks"], raw[pre + "down_proj_scales"])
            k = "params/layers.%d.mlp." % l
            pairs = [(hf_gu, ref_gu), (hf_down, ref_down),
                     (kiln_w[k + "wi_0"].double().numpy(), hf_gu[..., 0::2]),
                     (kiln_w[k + "wi_1"].double().numpy(), hf_gu[..., 1::2]),
                     (kiln_w[k + "wo"].double().numpy(), hf_down)]
            for a, b in pairs:
                checked += a.size
                mismatches += int((a != b).sum())
        rows.append({"check": args.name, "what": "MXFP4 experts bit-exact", "err": float(mismatches), "tol": 0.0,
                     "ok": mismatches == 0, "err_vs_f64": None, "hf32_vs_f64": None,
                     "note": "%d values: kiln import = transformers dequant = mxfp4_ref" % checked})
        writer = os.path.join(args.hf, "mxfp4_writer.txt")
        if os.path.exists(writer):
            rows[-1]["note"] += "; written by " + open(writer).read().strip()

    coverage = ("T=%d > sliding_window=%d; min top-%d router margin %.2e; clamp active on %.1f%% of gates, "
                "%.1f%% of ups (limit %g)"
                % (T, cfg.sliding_window, cfg.num_experts_per_tok, stats["margin"],
                   100.0 * stats["gate_clamped"] / max(stats["gate_values"], 1),
                   100.0 * stats["up_clamped"] / max(stats["gate_values"], 1), cfg.swiglu_limit))
    print("%s: transformers %s, torch %s; %s; rope %s; %.1f s" % (
        args.name, __import__("transformers").__version__, torch.__version__, coverage,
        json.dumps(cfg.rope_parameters, sort_keys=True), time.time() - t0))
    if stats["margin"] < MARGIN:
        print("WARNING: a router top-k margin of %.2e is within rounding reach: routing may differ" % stats["margin"])
    for r in rows:
        print("  %-28s %.2e (tol %.0e) %s  %s" % (r["what"], r["err"], r["tol"], "ok" if r["ok"] else "FAIL",
                                                    r["note"]))
    with open(args.results, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


# ----------------------------------------------------------------------------- table

def cmd_table(args):
    rows = [json.loads(line) for line in open(args.results) if line.strip()]
    fmt = lambda v: "-" if v is None else "%.2e" % v  # noqa: E731
    head = ("check", "compared", "error", "tol", "vs HF f64", "HF f32 vs f64", "")
    table = [head] + [(r["check"], r["what"], fmt(r["err"]) if r["tol"] else "%d" % r["err"], fmt(r["tol"]) if r["tol"] else "0",
                       fmt(r["err_vs_f64"]), fmt(r["hf32_vs_f64"]), "ok" if r["ok"] else "FAIL") for r in rows]
    widths = [max(len(str(t[i])) for t in table) for i in range(len(head))]
    for i, t in enumerate(table):
        print("  ".join(str(c).ljust(w) for c, w in zip(t, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    worst = [r for r in rows if r["what"].startswith("gradient (worst")]
    for r in worst:
        print("worst gradient (%s): %s" % (r["check"], r["note"]))
    failed = [r for r in rows if not r["ok"]]
    for r in failed:
        print("FAIL %s %s: %s" % (r["check"], r["what"], r["note"]))
    print("parity: %s (%d checks)" % ("FAIL" if failed else "ok", len(rows)))
    return 1 if failed else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens")
    t.add_argument("out")
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--len", type=int, required=True)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--hf", nargs="+", help="pick the first seed whose rows route without a near-tie in these models")
    m = sub.add_parser("make")
    m.add_argument("out")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--mxfp4", action="store_true")
    m.add_argument("--from-hf", help="an f32 HF dir for transformers' own MXFP4 quantize-and-save attempt")
    c = sub.add_parser("check")
    c.add_argument("--name", required=True)
    c.add_argument("--hf", required=True)
    c.add_argument("--tokens", required=True)
    c.add_argument("--logits", required=True)
    c.add_argument("--loss", required=True)
    c.add_argument("--grads")
    c.add_argument("--kiln-ckpt", help="the imported Kiln step dir: compare its MXFP4 expert weights bit for bit")
    c.add_argument("--results", required=True)
    c.add_argument("--verbose", action="store_true", help="print every gradient tensor's error")
    r = sub.add_parser("table")
    r.add_argument("results")
    args = p.parse_args()
    if args.cmd in ("make", "check") or (args.cmd == "tokens" and args.hf):
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()  # "Loading weights" / "Writing model shards"
    if args.cmd == "check":
        try:
            return cmd_check(args)
        except (Exception, SystemExit) as e:  # noqa: BLE001 (a check that cannot run is a failed row)
            message = "%s: %s" % (type(e).__name__, e)
            print("%s: %s" % (args.name, message))
            with open(args.results, "a") as f:
                f.write(json.dumps({"check": args.name, "what": "could not compare", "err": 1.0, "tol": 0.0,
                                    "ok": False, "err_vs_f64": None, "hf32_vs_f64": None, "note": message}) + "\n")
            return 1
    return {"tokens": cmd_tokens, "make": cmd_make, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
