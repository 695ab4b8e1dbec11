"""The transformers side of `make parity` for the model families beside GPT-OSS
(hf_parity_llama.py, qwen3_moe_parity.py, deepseek_parity.py): everything but the family's
own config, weights and routing, each script a `Family` of those handed to `main`.

Subcommands every family script has:
  make HF_DIR --seed S [family flags]
      the family's small model with seeded unit-scale random weights, save_pretrained (f32)
  tokens OUT.npy --vocab V --batch B --len T --seed S [--hf HF_DIR ...]      (MoE families)
      seeded random ids, int32 [B, T]; with --hf, from the first seed whose rows have no
      routing near-tie in those models (every decision's gap >= hf_parity.MARGIN)
  check --name NAME --hf HF_DIR --tokens T.npy --logits L.npy --loss LOSS.npy
        [--grads GRADS.safetensors] --results R.jsonl [--verbose]
      loads HF_DIR (float32, eager), runs it on the tokens with labels=ids and compares with
      `kiln forward`'s logits, per-token losses and (with --grads) its training-step gradient of
      every parameter, under Hugging Face names; a float64 copy of the model breaks ties

Errors and tolerances are hf_parity.py's: logits, per-token and mean loss 1e-5 relative,
every gradient 1e-4 relative to its largest entry.
"""
import argparse
import copy
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_parity import GRAD_TOL, LOGIT_TOL, LOSS_TOL, MARGIN, read_grads, rel  # noqa: E402


@dataclass
class Family:
    name: str                                  # "LlamaForCausalLM"
    make: Callable                             # (args) -> the model with random weights
    load_hf: Callable                          # (hf_dir) -> the model, float32, eval
    describe: Callable                         # (model) -> one line of its shape for the log
    router_margin: Optional[Callable] = None   # (model, ids) -> the smallest routing gap (MoE)
    regroup: Callable = lambda grads, config: grads  # transformers' gradients in the saved layout
    # Kiln gradients that transformers has none of, as (name predicate, why); they must be zero.
    zero_grads: list = field(default_factory=list)
    make_flags: list = field(default_factory=list)  # [(flag, argparse kwargs)]


def per_expert(grads, config):
    """transformers' fused expert gradients in save_pretrained's per-expert layout:
    gate_up_proj [E, 2I, D] -> experts.e.gate_proj [I, D] (rows :I) and up_proj (rows I:),
    down_proj [E, D, I] -> experts.e.down_proj [D, I]."""
    out = {}
    inner = config.moe_intermediate_size
    for name, g in grads.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            for e in range(g.shape[0]):
                out["%s%d.gate_proj.weight" % (base, e)] = g[e, :inner]
                out["%s%d.up_proj.weight" % (base, e)] = g[e, inner:]
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(g.shape[0]):
                out["%s%d.down_proj.weight" % (base, e)] = g[e]
        else:
            out[name] = g
    return out


def from_pretrained(cls, hf_dir, **kwargs):
    """cls.from_pretrained in float32 with eager attention; a missing, unexpected or misshapen
    tensor is an error (from_pretrained would otherwise initialise it at random)."""
    import torch
    model, info = cls.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True, **kwargs)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit("from_pretrained(%s): %s" % (hf_dir, problems))
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32, (name, p.dtype)
    return model.eval()


def run_hf(family, model, ids):
    """logits, per-token loss [B, T] (last position 0), the model's mean loss, gradients."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    logits = out.logits.detach().double().numpy()
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    token_loss = np.zeros(ids.shape, dtype=np.float64)
    token_loss[:, :-1] = -np.take_along_axis(logp[:, :-1], ids.numpy()[:, 1:, None], -1)[..., 0]
    grads = {n: p.grad.detach().double().numpy() for n, p in model.named_parameters() if p.grad is not None}
    return logits, token_loss, out.loss.item(), family.regroup(grads, model.config)


def cmd_make(family, args):
    import torch
    torch.manual_seed(args.seed)
    model = family.make(args)
    model.save_pretrained(args.out)
    print("make: %s %d parameters, f32, saved with save_pretrained to %s"
          % (family.name, sum(p.numel() for p in model.parameters()), args.out))
    return 0


def cmd_tokens(family, args):
    import torch
    models = [family.load_hf(d) for d in args.hf] if args.hf else []
    for seed in range(args.seed, args.seed + 100):
        ids = np.random.default_rng(seed).integers(0, args.vocab, size=(args.batch, args.len)).astype(np.int32)
        if not models:
            break
        margin = min(family.router_margin(m, torch.from_numpy(ids.astype(np.int64))) for m in models)
        if margin >= MARGIN:
            print("tokens: seed %d, smallest router top-k margin %.2e" % (seed, margin))
            break
    else:
        raise SystemExit("tokens: no seed in %d..%d routes without a near-tie" % (args.seed, args.seed + 99))
    np.save(args.out, ids)
    return 0


def cmd_check(family, args):
    import torch
    torch.manual_seed(0)
    t0 = time.time()
    model = family.load_hf(args.hf)
    model64 = copy.deepcopy(model).double()
    ids = torch.from_numpy(np.load(args.tokens).astype(np.int64))
    B, T = ids.shape
    margin = family.router_margin(model, ids) if family.router_margin else None
    logits, token_loss, loss, grads = run_hf(family, model, ids)
    logits64, token_loss64, _, grads64 = run_hf(family, model64, ids)
    loss64 = token_loss64[:, :-1].mean()
    kiln_logits = np.load(args.logits)
    kiln_loss = np.load(args.loss).astype(np.float64)
    if kiln_logits.shape != logits.shape:
        raise SystemExit("logits shape: kiln %s, transformers %s" % (kiln_logits.shape, logits.shape))
    kiln_mean = kiln_loss[:, :-1].mean()
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
        for takes, why in family.zero_grads:
            mine = [n for n in kg if takes(n)]
            row("%s gradients zero" % why, 0.0 if all(not np.any(kg[n]) for n in mine) else 1.0, 0.0,
                note="%d tensors" % len(mine))
            kg = {n: g for n, g in kg.items() if not takes(n)}
        if set(kg) != set(grads):
            rows.append({"check": args.name, "what": "gradient names", "err": float(len(set(kg) ^ set(grads))),
                         "tol": 0.0, "ok": False, "err_vs_f64": None, "hf32_vs_f64": None,
                         "note": "only kiln %s, only transformers %s" % (sorted(set(kg) - set(grads))[:4],
                                                                         sorted(set(grads) - set(kg))[:4])})
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
                print("  grad %-50s %.2e (vs f64 %.2e)" % (n, errs[n], rel(kg[n], grads64[n])))
    print("%s: transformers %s, torch %s; T=%d; %s%s; %.1f s" % (
        args.name, __import__("transformers").__version__, torch.__version__, T, family.describe(model),
        "" if margin is None else ", min routing margin %.2e" % margin, time.time() - t0))
    if margin is not None and margin < MARGIN:
        print("WARNING: a routing margin of %.2e is within rounding reach: routing may differ" % margin)
    for r in rows:
        print("  %-28s %.2e (tol %.0e) %s  %s" % (r["what"], r["err"], r["tol"], "ok" if r["ok"] else "FAIL",
                                                    r["note"]))
    with open(args.results, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


def main(family, doc):
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out")
    m.add_argument("--seed", type=int, default=0)
    for flag, kwargs in family.make_flags:
        m.add_argument(flag, **kwargs)
    if family.router_margin:
        t = sub.add_parser("tokens")
        t.add_argument("out")
        t.add_argument("--vocab", type=int, required=True)
        t.add_argument("--batch", type=int, required=True)
        t.add_argument("--len", type=int, required=True)
        t.add_argument("--seed", type=int, default=0)
        t.add_argument("--hf", nargs="+")
    c = sub.add_parser("check")
    for flag in ("--name", "--hf", "--tokens", "--logits", "--loss", "--results"):
        c.add_argument(flag, required=True)
    c.add_argument("--grads")
    c.add_argument("--verbose", action="store_true", help="print every gradient tensor's error")
    args = p.parse_args()
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    if args.cmd == "check":
        try:
            return cmd_check(family, args)
        except (Exception, SystemExit) as e:  # noqa: BLE001 (a check that cannot run is a failed row)
            message = "%s: %s" % (type(e).__name__, e)
            print("%s: %s" % (args.name, message))
            with open(args.results, "a") as f:
                f.write(json.dumps({"check": args.name, "what": "could not compare", "err": 1.0, "tol": 0.0,
                                    "ok": False, "err_vs_f64": None, "hf32_vs_f64": None, "note": message}) + "\n")
            return 1
    return {"make": cmd_make, "tokens": cmd_tokens}[args.cmd](family, args)
