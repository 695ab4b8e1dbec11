#!/usr/bin/env bash
# Kiln against Hugging Face transformers' GptOssForCausalLM, both ways (docs/parity.md):
#
#   (a) Kiln -> HF: a small GPT-OSS trained 3 steps by `kiln train`, exported with
#       `kiln convert --to hf`, loaded with GptOssForCausalLM.from_pretrained: logits, losses
#       and the gradient of every parameter against `kiln forward ... grads_out=`.
#   (b) HF -> Kiln: a small GptOssForCausalLM with seeded random weights, save_pretrained,
#       `kiln convert --from hf`, `kiln forward`: logits, losses and gradients; then the same
#       with MXFP4 expert blocks (bf16 elsewhere, as the released checkpoints).
#   Llama: the same two ways against LlamaForCausalLM (tests/reference/hf_parity_llama.py),
#       HF -> Kiln with tied embeddings too.
#   Qwen3-MoE: the same two ways against Qwen3MoeForCausalLM (tests/reference/qwen3_moe_parity.py).
#   DeepSeek-V3: the same two ways against DeepseekV3ForCausalLM (tests/reference/deepseek_parity.py).
#
# Usage: bash scripts/parity.sh        (KILN=path/to/kiln, PYTHON=path/to/python to override)
# Needs a kiln built from this tree (kiln forward grads_out=) and the Python packages of
# python/requirements-parity.txt in .venv/. Prints the table of measured errors; exits 1 when
# any is over its tolerance (2 when a prerequisite is missing). About 60 s of CPU; 1-2
# minutes of wall time on 2 cores.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KILN=${KILN:-$ROOT/build/kiln}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
REF=$ROOT/tests/reference/hf_parity.py

if [[ ! -x $KILN ]]; then
  echo "parity: no kiln binary at $KILN (build it, or set KILN=path)" >&2
  exit 2
fi
if ! "$PYTHON" -c 'import torch, transformers, safetensors' 2>/dev/null; then
  echo "parity: $PYTHON lacks torch/transformers/safetensors (scripts/setup_venv.sh python/requirements-parity.txt)" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-parity.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# Nothing here downloads: the models are made locally.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 KILN_PROGRESS=off

# Runs a command quietly; on failure shows its output and stops.
step() {
  if ! "$@" > "$WORK/step.log" 2>&1; then
    cat "$WORK/step.log" >&2
    echo "parity: FAILED: $*" >&2
    exit 1
  fi
}
ref() { "$PYTHON" "$REF" "$@"; }
lref() { "$PYTHON" "$ROOT/tests/reference/hf_parity_llama.py" "$@"; }
T=$SECONDS
took() { echo "  ($(( SECONDS - T )) s)"; T=$SECONDS; }
RESULTS=$WORK/results.jsonl
FAILED=0

# --------------------------------------------------------------------------- (a) Kiln -> HF
# gpt-oss-tiny's features at toy size: 4 layers (sliding, full, sliding, full), a 16-key
# window under 64-token rows, sinks, q/k/v/o, router and expert biases, top-2 of 4 experts.
# Numbers a mapping could get wrong are off their defaults: YaRN theta 1e4, factor 8, betas
# 24/2 (with head_dim 16 the ramp runs over dims 2.87 .. 5.03: fractional, so rope_truncate
# matters; false here, true in (b)); a SwiGLU clamp of 1.5 so the clamps act. No aux
# losses: transformers' loss is the mean cross-entropy.
MODEL_A="model_name=gpt-oss-tiny override_model_config=true base_num_decoder_layers=4 vocab_size=512
  base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 base_moe_mlp_dim=32 base_mlp_dim=32
  num_experts=4 num_experts_per_tok=2 sliding_window_size=16 mlp_activations_limit=1.5
  rope_max_timescale=10000 rope_factor=8 original_max_position_embeddings=4096 max_position_embeddings=32768
  beta_fast=24 beta_slow=2 dtype=float32 weight_dtype=float32 max_target_length=64 per_device_batch_size=2
  load_balance_loss_weight=0 z_loss_multiplier=0"
echo "parity (a) Kiln -> HF: train 3 steps, export, compare logits, losses and every gradient"
# shellcheck disable=SC2086
step "$KILN" train $MODEL_A steps=3 learning_rate=3e-2 warmup_steps_fraction=0 \
  base_output_directory="$WORK" run_name=a enable_checkpointing=true async_checkpointing=false
step "$KILN" convert --from kiln --to hf "$WORK/a/checkpoints" "$WORK/a_hf"
# Tokens whose routing has no near-tie (top-k is discontinuous: a gap under rounding could
# pick another expert on one side): the first seed from 1 with every top-k gap >= 1e-4.
step ref tokens "$WORK/a_tokens.npy" --vocab 512 --batch 2 --len 64 --seed 1 --hf "$WORK/a_hf"
step "$KILN" forward "$WORK/a/checkpoints" tokens="$WORK/a_tokens.npy" out="$WORK/a_logits.npy" \
  grads_out="$WORK/a_grads.safetensors" load_balance_loss_weight=0 z_loss_multiplier=0
ref check --name "(a) kiln->hf" --hf "$WORK/a_hf" --tokens "$WORK/a_tokens.npy" --logits "$WORK/a_logits.npy" \
  --loss "$WORK/a_logits.loss.npy" --grads "$WORK/a_grads.safetensors" --results "$RESULTS" || FAILED=1
took

# --------------------------------------------------------------------------- (b) HF -> Kiln
echo "parity (b) HF -> Kiln: GptOssForCausalLM with random weights, save_pretrained, import, compare"
step ref make "$WORK/b_hf" --seed 3
# The same architecture with MXFP4 expert blocks and bf16 elsewhere, as the released
# checkpoints (made by transformers when it can write MXFP4, else by the reference packing).
ref make "$WORK/m_hf" --seed 5 --mxfp4 --from-hf "$WORK/b_hf" > "$WORK/make.log" 2>&1 || { cat "$WORK/make.log"; exit 1; }
step ref tokens "$WORK/b_tokens.npy" --vocab 1000 --batch 2 --len 48 --seed 4 --hf "$WORK/b_hf" "$WORK/m_hf"
step "$KILN" convert --from hf --to kiln "$WORK/b_hf" "$WORK/b_kiln"
step "$KILN" forward "$WORK/b_kiln" tokens="$WORK/b_tokens.npy" out="$WORK/b_logits.npy" \
  grads_out="$WORK/b_grads.safetensors" load_balance_loss_weight=0 z_loss_multiplier=0
ref check --name "(b) hf->kiln" --hf "$WORK/b_hf" --tokens "$WORK/b_tokens.npy" --logits "$WORK/b_logits.npy" \
  --loss "$WORK/b_logits.loss.npy" --grads "$WORK/b_grads.safetensors" --results "$RESULTS" || FAILED=1
took

# MXFP4: Kiln computes in f32 from the bf16 weights (dtype=float32), as transformers does
# after dequantizing; the gradients would be bf16-rounded on Kiln's side: not compared.
echo "parity (b) HF -> Kiln, MXFP4 experts"
grep '^make: transformers' "$WORK/make.log" | sed 's/^make: /  /'
step "$KILN" convert --from hf --to kiln "$WORK/m_hf" "$WORK/m_kiln"
step "$KILN" forward "$WORK/m_kiln" tokens="$WORK/b_tokens.npy" out="$WORK/m_logits.npy" dtype=float32
ref check --name "(b) hf->kiln mxfp4" --hf "$WORK/m_hf" --tokens "$WORK/b_tokens.npy" --logits "$WORK/m_logits.npy" \
  --loss "$WORK/m_logits.loss.npy" --kiln-ckpt "$WORK/m_kiln/0" --results "$RESULTS" || FAILED=1
took

# --------------------------------------------------------------------------- Llama
# llama3-tiny at toy size: 3 layers, 4 query heads on 2 kv heads of width 16, Llama 3.1's RoPE
# scaling where those heads feel it (theta 1e4, factor 4 over an original 32-token context:
# the first frequency kept, the second blended, the rest divided) under 80-token rows, and
# a norm epsilon off the default. No z-loss: transformers' loss is the mean cross-entropy.
MODEL_L="model_name=llama3-tiny override_model_config=true base_num_decoder_layers=3 vocab_size=512
  base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 base_mlp_dim=96
  rope_max_timescale=10000 rope_factor=4 original_max_position_embeddings=32 max_position_embeddings=128
  normalization_layer_epsilon=2e-5 dtype=float32 weight_dtype=float32 max_target_length=64
  per_device_batch_size=2 z_loss_multiplier=0"
echo "parity (a) Llama Kiln -> HF: train 3 steps, export, compare logits, losses and every gradient"
# shellcheck disable=SC2086
step "$KILN" train $MODEL_L steps=3 learning_rate=3e-2 warmup_steps_fraction=0 \
  base_output_directory="$WORK" run_name=la enable_checkpointing=true async_checkpointing=false
step "$KILN" convert --from kiln --to hf "$WORK/la/checkpoints" "$WORK/la_hf"
step ref tokens "$WORK/la_tokens.npy" --vocab 512 --batch 2 --len 80 --seed 1
step "$KILN" forward "$WORK/la/checkpoints" tokens="$WORK/la_tokens.npy" out="$WORK/la_logits.npy" \
  grads_out="$WORK/la_grads.safetensors" z_loss_multiplier=0
lref check --name "(a) llama kiln->hf" --hf "$WORK/la_hf" --tokens "$WORK/la_tokens.npy" \
  --logits "$WORK/la_logits.npy" --loss "$WORK/la_logits.loss.npy" --grads "$WORK/la_grads.safetensors" \
  --results "$RESULTS" || FAILED=1
took

echo "parity (b) Llama HF -> Kiln: LlamaForCausalLM with random weights (untied, tied), save_pretrained, import"
step ref tokens "$WORK/lb_tokens.npy" --vocab 1000 --batch 2 --len 80 --seed 4
for m in lb lt; do
  step lref make "$WORK/${m}_hf" --seed "$([[ $m == lb ]] && echo 3 || echo 5)" $([[ $m == lt ]] && echo --tied)
  step "$KILN" convert --from hf --to kiln "$WORK/${m}_hf" "$WORK/${m}_kiln"
  step "$KILN" forward "$WORK/${m}_kiln" tokens="$WORK/lb_tokens.npy" out="$WORK/${m}_logits.npy" \
    grads_out="$WORK/${m}_grads.safetensors" z_loss_multiplier=0
  lref check --name "(b) llama hf->kiln$([[ $m == lt ]] && echo ' tied')" --hf "$WORK/${m}_hf" \
    --tokens "$WORK/lb_tokens.npy" --logits "$WORK/${m}_logits.npy" --loss "$WORK/${m}_logits.loss.npy" \
    --grads "$WORK/${m}_grads.safetensors" --results "$RESULTS" || FAILED=1
done
took

# --------------------------------------------------------------------------- Qwen3-MoE
# qwen3-moe-tiny at toy size: 3 layers, QK-norm on 4 query heads and 2 kv heads of width 32
# (not emb / heads = 16), a softmax router picking 3 of 8 SwiGLU experts, renormalised;
# theta and eps off the defaults. No aux losses: transformers' loss is the mean cross-entropy.
qref() { "$PYTHON" "$ROOT/tests/reference/qwen3_moe_parity.py" "$@"; }
MODEL_Q="model_name=qwen3-moe-tiny override_model_config=true base_num_decoder_layers=3 vocab_size=512
  base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=32 base_moe_mlp_dim=32
  num_experts=8 num_experts_per_tok=3 rope_max_timescale=20000 normalization_layer_epsilon=3e-6
  dtype=float32 weight_dtype=float32 max_target_length=64 per_device_batch_size=2
  load_balance_loss_weight=0 z_loss_multiplier=0"
echo "parity (a) Qwen3-MoE Kiln -> HF: train 3 steps, export, compare logits, losses and every gradient"
# shellcheck disable=SC2086
step "$KILN" train $MODEL_Q steps=3 learning_rate=3e-2 warmup_steps_fraction=0 \
  base_output_directory="$WORK" run_name=qa enable_checkpointing=true async_checkpointing=false
step "$KILN" convert --from kiln --to hf "$WORK/qa/checkpoints" "$WORK/qa_hf"
step qref tokens "$WORK/qa_tokens.npy" --vocab 512 --batch 2 --len 64 --seed 1 --hf "$WORK/qa_hf"
step "$KILN" forward "$WORK/qa/checkpoints" tokens="$WORK/qa_tokens.npy" out="$WORK/qa_logits.npy" \
  grads_out="$WORK/qa_grads.safetensors" load_balance_loss_weight=0 z_loss_multiplier=0
qref check --name "(a) qwen3_moe kiln->hf" --hf "$WORK/qa_hf" --tokens "$WORK/qa_tokens.npy" \
  --logits "$WORK/qa_logits.npy" --loss "$WORK/qa_logits.loss.npy" --grads "$WORK/qa_grads.safetensors" \
  --results "$RESULTS" || FAILED=1
took

echo "parity (b) Qwen3-MoE HF -> Kiln: Qwen3MoeForCausalLM with random weights, save_pretrained, import"
step qref make "$WORK/qb_hf" --seed 3
step qref tokens "$WORK/qb_tokens.npy" --vocab 500 --batch 2 --len 48 --seed 4 --hf "$WORK/qb_hf"
step "$KILN" convert --from hf --to kiln "$WORK/qb_hf" "$WORK/qb_kiln"
step "$KILN" forward "$WORK/qb_kiln" tokens="$WORK/qb_tokens.npy" out="$WORK/qb_logits.npy" \
  grads_out="$WORK/qb_grads.safetensors" load_balance_loss_weight=0 z_loss_multiplier=0
qref check --name "(b) qwen3_moe hf->kiln" --hf "$WORK/qb_hf" --tokens "$WORK/qb_tokens.npy" \
  --logits "$WORK/qb_logits.npy" --loss "$WORK/qb_logits.loss.npy" --grads "$WORK/qb_grads.safetensors" \
  --results "$RESULTS" || FAILED=1
took

# --------------------------------------------------------------------------- DeepSeek-V3
# deepseek3-tiny at toy size: 3 layers (1 dense, 2 MoE), MLA with a low-rank query on 4 heads,
# YaRN on interleaved pairs with the mscale^2 softmax scale, sigmoid routing with a correction
# bias (moved by the bias update while training, so the export carries a non-zero one), top-2
# of 8 experts from 2 of 4 groups, a shared expert. transformers has no MTP module: off here.
dref() { "$PYTHON" "$ROOT/tests/reference/deepseek_parity.py" "$@"; }
MODEL_D="model_name=deepseek3-tiny override_model_config=true vocab_size=512 base_emb_dim=64
  base_num_query_heads=4 base_num_kv_heads=4 q_lora_rank=32 kv_lora_rank=16 qk_nope_head_dim=16
  qk_rope_head_dim=8 v_head_dim=12 base_mlp_dim=96 base_moe_mlp_dim=24 mtp_num_layers=0
  dtype=float32 weight_dtype=float32 max_target_length=64 per_device_batch_size=2"
echo "parity (a) DeepSeek-V3 Kiln -> HF: train 3 steps, export, compare logits, losses and every gradient"
# shellcheck disable=SC2086
step "$KILN" train $MODEL_D steps=3 learning_rate=3e-2 warmup_steps_fraction=0 routed_bias_update_rate=0.05 \
  base_output_directory="$WORK" run_name=da enable_checkpointing=true async_checkpointing=false
step "$KILN" convert --from kiln --to hf "$WORK/da/checkpoints" "$WORK/da_hf"
step dref tokens "$WORK/da_tokens.npy" --vocab 512 --batch 2 --len 64 --seed 1 --hf "$WORK/da_hf"
step "$KILN" forward "$WORK/da/checkpoints" tokens="$WORK/da_tokens.npy" out="$WORK/da_logits.npy" \
  grads_out="$WORK/da_grads.safetensors"
dref check --name "(a) deepseek kiln->hf" --hf "$WORK/da_hf" --tokens "$WORK/da_tokens.npy" \
  --logits "$WORK/da_logits.npy" --loss "$WORK/da_logits.loss.npy" --grads "$WORK/da_grads.safetensors" \
  --results "$RESULTS" || FAILED=1
took

echo "parity (b) DeepSeek-V3 HF -> Kiln: DeepseekV3ForCausalLM with random weights, save_pretrained, import"
step dref make "$WORK/db_hf" --seed 3
step dref tokens "$WORK/db_tokens.npy" --vocab 500 --batch 2 --len 48 --seed 4 --hf "$WORK/db_hf"
step "$KILN" convert --from hf --to kiln "$WORK/db_hf" "$WORK/db_kiln"
step "$KILN" forward "$WORK/db_kiln" tokens="$WORK/db_tokens.npy" out="$WORK/db_logits.npy" \
  grads_out="$WORK/db_grads.safetensors"
dref check --name "(b) deepseek hf->kiln" --hf "$WORK/db_hf" --tokens "$WORK/db_tokens.npy" \
  --logits "$WORK/db_logits.npy" --loss "$WORK/db_logits.loss.npy" --grads "$WORK/db_grads.safetensors" \
  --results "$RESULTS" || FAILED=1
took

# transformers has no MTP module: DeepSeek-V3's multi-token prediction is checked against an
# independent PyTorch implementation (tests/reference/deepseek_mtp_ref.py) by a test that needs
# this venv's torch and transformers, so it runs here rather than in make test.
echo "parity: DeepSeek-V3 multi-token prediction against tests/reference/deepseek_mtp_ref.py"
MTP_TEST=$(dirname "$KILN")/tests/models/deepseek_mtp_test
if [[ -x $MTP_TEST ]]; then
  if "$MTP_TEST" > "$WORK/mtp.log" 2>&1 && grep -q "\[  PASSED  \] 1 test" "$WORK/mtp.log"; then
    echo "  DeepseekMtp.LossAndGradientsMatchPyTorchReference: ok"
  else
    cat "$WORK/mtp.log" >&2
    echo "  DeepseekMtp.LossAndGradientsMatchPyTorchReference: FAILED"
    FAILED=1
  fi
else
  echo "  no $MTP_TEST (build the tests): not checked"
  FAILED=1
fi
took

echo
ref table "$RESULTS" || FAILED=1
echo "parity: $SECONDS s ($KILN)"
exit $FAILED
