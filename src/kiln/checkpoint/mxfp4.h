// MXFP4 (OCP microscaling FP4) as the GPT-OSS release stores its expert matrices (spec §1.8):
//
//   <name>_blocks  U8 [..., G, 16]  two FP4 E2M1 codes per byte: the low nibble is element
//                                   2m, the high nibble element 2m + 1 (32 elements a block)
//   <name>_scales  U8 [..., G]      one E8M0 exponent per block: value = lut[code] · 2^(scale − 127)
//   lut = {+0, +0.5, +1, +1.5, +2, +3, +4, +6, −0, −0.5, −1, −1.5, −2, −3, −4, −6}
//
// The hub's tensors are in the OpenAI "out × in" layout ([E, 2I, D/32, 16] for
// gate_up_proj, [E, D, I/32, 16] for down_proj); Hugging Face's loader dequantizes along the
// last dimension and then swaps the last two, giving gate_up_proj [E, D, 2I] and down_proj
// [E, I, D]. dequantize_mxfp4 does the same.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/ir/literal.h"

namespace kiln::checkpoint {

// blocks [P..., R, G, 16] and scales [P..., R, G] -> [P..., G·32, R] in `dtype` (bf16 holds
// every value exactly unless the scale over- or underflows it). `name` is used in errors.
Result<ir::Literal> dequantize_mxfp4(const std::string& name, const std::vector<int64_t>& block_dims,
                                     const std::string& blocks, const std::vector<int64_t>& scale_dims,
                                     const std::string& scales, ir::DType dtype);

// The streaming import's form: rows [q0, q1) of the blocks (q = the flattened (p, r) index
// over [P..., R, G, 16]; `blocks` and `scales` point at row q0's bytes) written into `out`,
// the bytes of the dequantized [P..., G·32, R / step] in `dtype` (bf16 or f32) keeping rows
// r = first, first + step, ...: out(p, c, (r − first) / step) = value(p, r, c). With first 0
// and step 1 it is dequantize_mxfp4's tensor; step 2 picks gate_up_proj's gate (first 0) or
// up (first 1) half without dequantizing the other. Values round to `dtype` exactly as
// dequantize_mxfp4 + literal_bytes would.
void dequantize_mxfp4_rows(const unsigned char* blocks, const unsigned char* scales, int64_t q0, int64_t q1,
                           int64_t R, int64_t G, int64_t first, int64_t step, ir::DType dtype, char* out);

// Reads every tensor of the Hugging Face safetensors files `paths`; each `X_blocks` +
// `X_scales` pair becomes the bf16 tensor `X` (dequantized as above). A lone half of a pair
// is an error naming it.
Result<std::map<std::string, ir::Literal>> read_hf_tensors(const std::vector<std::string>& paths);

}  // namespace kiln::checkpoint
