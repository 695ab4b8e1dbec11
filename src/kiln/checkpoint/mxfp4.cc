#include "kiln/checkpoint/mxfp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/checkpoint/safetensors.h"

namespace kiln::checkpoint {

namespace {

constexpr double kLut[16] = {+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0,
                             -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};

}  // namespace

Result<ir::Literal> dequantize_mxfp4(const std::string& name, const std::vector<int64_t>& bd, const std::string& blocks,
                                     const std::vector<int64_t>& sd, const std::string& scales, ir::DType dtype) {
  // blocks [P..., R, G, 16], scales [P..., R, G].
  if (bd.size() < 3 || bd.back() != 16 || sd.size() + 1 != bd.size() ||
      !std::equal(sd.begin(), sd.end(), bd.begin())) {
    return invalid_argument("MXFP4 tensor {}: blocks {} and scales {} do not fit [..., R, G, 16] and [..., R, G]", name,
                            ir::dims_to_string(bd), ir::dims_to_string(sd));
  }
  const size_t rank = bd.size();
  const int64_t G = bd[rank - 2], R = bd[rank - 3];
  int64_t P = 1;
  for (size_t i = 0; i + 3 < rank; ++i) P *= bd[i];
  if (static_cast<int64_t>(blocks.size()) != P * R * G * 16 || static_cast<int64_t>(scales.size()) != P * R * G) {
    return data_loss("MXFP4 tensor {}: {} block bytes and {} scale bytes for blocks {}", name, blocks.size(),
                     scales.size(), ir::dims_to_string(bd));
  }
  const int64_t C = G * 32;  // dequantized last dimension before the swap
  std::vector<int64_t> out_dims(bd.begin(), bd.end() - 3);
  out_dims.push_back(C);
  out_dims.push_back(R);
  std::vector<double> v(static_cast<size_t>(P * R * C));
  const auto* b = reinterpret_cast<const unsigned char*>(blocks.data());
  const auto* s = reinterpret_cast<const unsigned char*>(scales.data());
  for (int64_t p = 0; p < P; ++p)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t blk = (p * R + r) * G + g;
        const int exponent = static_cast<int>(s[blk]) - 127;
        for (int64_t m = 0; m < 16; ++m) {
          const unsigned char byte = b[blk * 16 + m];
          const int64_t c = g * 32 + 2 * m;
          // Element (p, r, c) lands at (p, c, r) after the swap of the last two dimensions.
          v[static_cast<size_t>((p * C + c) * R + r)] = std::ldexp(kLut[byte & 0x0F], exponent);
          v[static_cast<size_t>((p * C + c + 1) * R + r)] = std::ldexp(kLut[byte >> 4], exponent);
        }
      }
  return ir::Literal(ir::Shape(dtype, out_dims), std::move(v));  // rounds to dtype (exact for bf16 and f32)
}

void dequantize_mxfp4_rows(const unsigned char* b, const unsigned char* s, int64_t q0, int64_t q1, int64_t R,
                           int64_t G, int64_t first, int64_t step, ir::DType dtype, char* out) {
  const int64_t C = G * 32, kept = R / step;
  // The value as dequantize_mxfp4 computes it (a double), stored in `dtype` through the
  // same roundings as Literal + literal_bytes (to float, then to bf16's nearest even).
  auto store = [&](int64_t at, double v) {
    if (dtype == ir::DType::kBF16) {
      const uint16_t bits = ir::float_to_bf16_bits(static_cast<float>(v));
      std::memcpy(out + 2 * at, &bits, 2);
    } else {
      const float f = static_cast<float>(v);
      std::memcpy(out + 4 * at, &f, 4);
    }
  };
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t p = q / R, r = q % R;
    if (r < first || (r - first) % step != 0) continue;
    const int64_t j = (r - first) / step;
    if (j >= kept) continue;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t blk = (q - q0) * G + g;
      const int exponent = static_cast<int>(s[blk]) - 127;
      for (int64_t m = 0; m < 16; ++m) {
        const unsigned char byte = b[blk * 16 + m];
        const int64_t c = g * 32 + 2 * m;
        store((p * C + c) * kept + j, std::ldexp(kLut[byte & 0x0F], exponent));
        store((p * C + c + 1) * kept + j, std::ldexp(kLut[byte >> 4], exponent));
      }
    }
  }
}

Result<std::map<std::string, ir::Literal>> read_hf_tensors(const std::vector<std::string>& paths) {
  std::map<std::string, ir::Literal> out;
  for (const std::string& path : paths) {
    KILN_ASSIGN_OR_RETURN(SafetensorsIndex index, index_safetensors(path));
    for (const std::string& name : index.names) {
      const SafetensorsEntry& e = index.entries.at(name);
      if (name.ends_with("_scales")) {
        const std::string base = name.substr(0, name.size() - 7);
        if (!index.entries.count(base + "_blocks")) {
          return invalid_argument("{}: MXFP4 tensor {} has no {}_blocks beside it", path, name, base);
        }
        continue;  // read with its blocks
      }
      if (name.ends_with("_blocks")) {
        const std::string base = name.substr(0, name.size() - 7);
        auto scales = index.entries.find(base + "_scales");
        if (scales == index.entries.end()) {
          return invalid_argument("{}: MXFP4 tensor {} has no {}_scales beside it", path, name, base);
        }
        if (e.dtype != "U8" || scales->second.dtype != "U8") {
          return invalid_argument("{}: MXFP4 tensors {} and {}_scales must be U8, got {} and {}", path, name, base,
                                  e.dtype, scales->second.dtype);
        }
        KILN_ASSIGN_OR_RETURN(std::string blocks, read_tensor_bytes(index, name));
        KILN_ASSIGN_OR_RETURN(std::string scale_bytes, read_tensor_bytes(index, base + "_scales"));
        KILN_ASSIGN_OR_RETURN(ir::Literal value, dequantize_mxfp4(name, e.dims, blocks, scales->second.dims,
                                                                  scale_bytes, ir::DType::kBF16));
        out[base] = std::move(value);
        continue;
      }
      Result<ir::DType> dtype = parse_safetensors_dtype(e.dtype);
      if (!dtype.ok()) return invalid_argument("{}: tensor {}: {}", path, name, dtype.status().message());
      KILN_ASSIGN_OR_RETURN(std::string bytes, read_tensor_bytes(index, name));
      KILN_ASSIGN_OR_RETURN(out[name], literal_from_bytes(ir::Shape(*dtype, e.dims), bytes));
    }
  }
  return out;
}

}  // namespace kiln::checkpoint
