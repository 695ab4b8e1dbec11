#include "tests/runtime/collective_checks.h"

#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "kiln/runtime/reduce.h"

namespace kiln::runtime::testing {
namespace {

// splitmix64: the same stream on every device for the same (device, seed, index).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t value_bits(int64_t device, uint64_t seed, size_t i) {
  return mix(mix(seed * 1000003 + static_cast<uint64_t>(device)) + i);
}

std::vector<uint8_t> bytes_of(int64_t device, uint64_t seed, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(value_bits(device, seed, i));
  return v;
}

// `count` elements of `dtype`, never all zeros or ones: floats in (-2, 2), s32 spanning the
// whole range (so sums wrap).
std::vector<uint8_t> elements_of(int64_t device, uint64_t seed, size_t count, ReduceDType dtype) {
  size_t es = reduce_dtype_size(dtype);
  std::vector<uint8_t> v(count * es);
  for (size_t i = 0; i < count; ++i) {
    uint64_t b = value_bits(device, seed, i);
    double x = (static_cast<double>(b >> 11) / 9007199254740992.0) * 4.0 - 2.0;
    switch (dtype) {
      case ReduceDType::kF32: { float f = static_cast<float>(x); std::memcpy(&v[i * es], &f, 4); break; }
      case ReduceDType::kF64: std::memcpy(&v[i * es], &x, 8); break;
      case ReduceDType::kBF16: { uint16_t h = f32_to_bf16(static_cast<float>(x)); std::memcpy(&v[i * es], &h, 2); break; }
      case ReduceDType::kS32: { int32_t s = static_cast<int32_t>(b); std::memcpy(&v[i * es], &s, 4); break; }
    }
  }
  return v;
}

// The expected rank-order sum, computed here independently of reduce.cc's blocked loops.
std::vector<uint8_t> expected_sum(const Group& group, uint64_t seed, size_t count, size_t offset,
                                  size_t total, ReduceDType dtype) {
  size_t es = reduce_dtype_size(dtype);
  std::vector<std::vector<uint8_t>> ins;
  for (int64_t d : group) ins.push_back(elements_of(d, seed, total, dtype));
  std::vector<uint8_t> out(count * es);
  for (size_t i = 0; i < count; ++i) {
    size_t at = (offset + i) * es;
    switch (dtype) {
      case ReduceDType::kF32: case ReduceDType::kBF16: {
        float acc = 0;
        for (size_t k = 0; k < ins.size(); ++k) {
          float x;
          if (dtype == ReduceDType::kF32) {
            std::memcpy(&x, &ins[k][at], 4);
          } else {
            uint16_t h;
            std::memcpy(&h, &ins[k][at], 2);
            x = bf16_to_f32(h);
          }
          acc = k == 0 ? x : acc + x;
        }
        if (dtype == ReduceDType::kF32) {
          std::memcpy(&out[i * es], &acc, 4);
        } else {
          uint16_t h = f32_to_bf16(acc);
          std::memcpy(&out[i * es], &h, 2);
        }
        break;
      }
      case ReduceDType::kF64: {
        double acc = 0;
        for (size_t k = 0; k < ins.size(); ++k) {
          double x;
          std::memcpy(&x, &ins[k][at], 8);
          acc = k == 0 ? x : acc + x;
        }
        std::memcpy(&out[i * es], &acc, 8);
        break;
      }
      case ReduceDType::kS32: {
        uint32_t acc = 0;
        for (auto& in : ins) {
          uint32_t x;
          std::memcpy(&x, &in[at], 4);
          acc += x;
        }
        std::memcpy(&out[i * es], &acc, 4);
        break;
      }
    }
  }
  return out;
}

size_t rank_in(const Group& group, int64_t device) {
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] == device) return i;
  }
  return group.size();
}

Status compare(const char* what, const Group& group, int64_t device, const std::vector<uint8_t>& got,
               const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return internal_error("{} over {} on device {}: {} bytes, expected {}", what,
                          group_to_string(group), device, got.size(), want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return internal_error("{} over {} on device {}: byte {} is {}, expected {}", what,
                            group_to_string(group), device, i, got[i], want[i]);
    }
  }
  return ok_status();
}

}  // namespace

Group inner_group(int64_t device, int64_t inner) {
  Group g;
  int64_t base = device / inner * inner;
  for (int64_t i = 0; i < inner; ++i) g.push_back(base + i);
  return g;
}

Group outer_group(int64_t device, int64_t num_devices, int64_t inner) {
  Group g;
  for (int64_t d = device % inner; d < num_devices; d += inner) g.push_back(d);
  return g;
}

Status check_all_gather(Collectives& c, const Group& group, size_t bytes, uint64_t seed) {
  std::vector<uint8_t> in = bytes_of(c.device(), seed, bytes);
  std::vector<uint8_t> out(bytes * group.size(), 0xee);
  KILN_RETURN_IF_ERROR(c.all_gather(group, in.data(), bytes, out.data())->wait());
  std::vector<uint8_t> want;
  for (int64_t d : group) {
    std::vector<uint8_t> part = bytes_of(d, seed, bytes);
    want.insert(want.end(), part.begin(), part.end());
  }
  return compare("all_gather", group, c.device(), out, want);
}

Status check_reduce_scatter(Collectives& c, const Group& group, size_t count, ReduceDType dtype,
                            uint64_t seed) {
  size_t n = group.size(), es = reduce_dtype_size(dtype), r = rank_in(group, c.device());
  std::vector<uint8_t> in = elements_of(c.device(), seed, count * n, dtype);
  std::vector<uint8_t> out(count * es, 0xee);
  KILN_RETURN_IF_ERROR(c.reduce_scatter(group, in.data(), out.data(), count, dtype)->wait());
  return compare("reduce_scatter", group, c.device(), out,
                 expected_sum(group, seed, count, r * count, count * n, dtype));
}

Status check_all_gather_blocked(Collectives& c, const Group& group, size_t bytes, size_t outer,
                                uint64_t seed) {
  // in [outer][b] on every member -> out [outer][rank][b]
  size_t n = group.size(), b = bytes / outer;
  std::vector<uint8_t> in = bytes_of(c.device(), seed, bytes);
  std::vector<uint8_t> out(bytes * n, 0xee);
  KILN_RETURN_IF_ERROR(c.all_gather_blocked(group, in.data(), bytes, out.data(), outer)->wait());
  std::vector<uint8_t> want;
  for (size_t o = 0; o < outer; ++o) {
    for (int64_t d : group) {
      std::vector<uint8_t> part = bytes_of(d, seed, bytes);
      want.insert(want.end(), part.begin() + o * b, part.begin() + (o + 1) * b);
    }
  }
  return compare("all_gather_blocked", group, c.device(), out, want);
}

Status check_reduce_scatter_blocked(Collectives& c, const Group& group, size_t count, size_t outer,
                                    ReduceDType dtype, uint64_t seed) {
  // in [outer][n][k] on every member -> out [outer][k], the sums of column my_rank
  size_t n = group.size(), es = reduce_dtype_size(dtype), r = rank_in(group, c.device()), k = count / outer;
  std::vector<uint8_t> in = elements_of(c.device(), seed, count * n, dtype);
  std::vector<uint8_t> out(count * es, 0xee);
  KILN_RETURN_IF_ERROR(c.reduce_scatter_blocked(group, in.data(), out.data(), count, dtype, outer)->wait());
  std::vector<uint8_t> want;
  for (size_t o = 0; o < outer; ++o) {
    std::vector<uint8_t> part = expected_sum(group, seed, k, (o * n + r) * k, count * n, dtype);
    want.insert(want.end(), part.begin(), part.end());
  }
  return compare("reduce_scatter_blocked", group, c.device(), out, want);
}

Status check_all_reduce(Collectives& c, const Group& group, size_t count, ReduceDType dtype,
                        uint64_t seed, bool in_place) {
  size_t es = reduce_dtype_size(dtype);
  std::vector<uint8_t> in = elements_of(c.device(), seed, count, dtype);
  std::vector<uint8_t> out(count * es, 0xee);
  void* dst = in_place ? in.data() : out.data();
  KILN_RETURN_IF_ERROR(c.all_reduce(group, in.data(), dst, count, dtype)->wait());
  std::vector<uint8_t>& got = in_place ? in : out;
  return compare(in_place ? "all_reduce (in place)" : "all_reduce", group, c.device(), got,
                 expected_sum(group, seed, count, 0, count, dtype));
}

Status check_all_to_all(Collectives& c, const Group& group, size_t chunk_bytes, uint64_t seed) {
  size_t n = group.size(), r = rank_in(group, c.device());
  std::vector<uint8_t> in = bytes_of(c.device(), seed, chunk_bytes * n);
  std::vector<uint8_t> out(chunk_bytes * n, 0xee);
  KILN_RETURN_IF_ERROR(c.all_to_all(group, in.data(), out.data(), chunk_bytes)->wait());
  std::vector<uint8_t> want;
  for (int64_t d : group) {
    std::vector<uint8_t> theirs = bytes_of(d, seed, chunk_bytes * n);
    want.insert(want.end(), theirs.begin() + r * chunk_bytes, theirs.begin() + (r + 1) * chunk_bytes);
  }
  return compare("all_to_all", group, c.device(), out, want);
}

namespace {
// What device `from` sends to rank `to` in the ragged check: a size that varies with both
// (zero for some pairs), packed in rank order with 3 bytes of gap.
size_t ragged_size(int64_t from, size_t to, uint64_t seed) { return (mix(seed + from * 31 + to) % 5) * 7; }
}  // namespace

Status check_ragged_all_to_all(Collectives& c, const Group& group, uint64_t seed) {
  size_t n = group.size(), r = rank_in(group, c.device());
  std::vector<size_t> send_offsets(n), send_bytes(n), recv_offsets(n);
  size_t at = 0;
  for (size_t j = 0; j < n; ++j) {
    send_offsets[j] = at;
    send_bytes[j] = ragged_size(c.device(), j, seed);
    at += send_bytes[j] + 3;
  }
  std::vector<uint8_t> in = bytes_of(c.device(), seed, at);
  size_t worst = 28 + 5;  // most any sender sends to one rank, plus a gap
  for (size_t i = 0; i < n; ++i) recv_offsets[i] = (n - 1 - i) * worst;  // reversed on purpose
  std::vector<uint8_t> out(worst * n, 0xee);
  std::vector<size_t> recv_bytes;
  KILN_RETURN_IF_ERROR(c.ragged_all_to_all(group, in.data(), send_offsets, send_bytes, out.data(),
                                           recv_offsets, &recv_bytes)
                           ->wait());
  std::vector<uint8_t> want(worst * n, 0xee);
  for (size_t i = 0; i < n; ++i) {
    int64_t d = group[i];
    size_t off = 0;
    for (size_t j = 0; j < r; ++j) off += ragged_size(d, j, seed) + 3;
    size_t b = ragged_size(d, r, seed);
    if (recv_bytes.size() != n || recv_bytes[i] != b) {
      return internal_error("ragged_all_to_all over {} on device {}: recv_bytes[{}] is {}, expected {}",
                            group_to_string(group), c.device(), i,
                            recv_bytes.size() == n ? recv_bytes[i] : 0, b);
    }
    std::vector<uint8_t> theirs = bytes_of(d, seed, off + b);
    std::copy(theirs.begin() + off, theirs.begin() + off + b, want.begin() + recv_offsets[i]);
  }
  return compare("ragged_all_to_all", group, c.device(), out, want);
}

Status check_async_reverse_wait(Collectives& c, const Group& a, const Group& b, uint64_t seed) {
  const size_t bytes = 4096, count = 3001;
  std::vector<uint8_t> in_a = bytes_of(c.device(), seed, bytes);
  std::vector<uint8_t> out_a(bytes * a.size());
  std::vector<uint8_t> in_b = elements_of(c.device(), seed + 1, count, ReduceDType::kF32);
  std::vector<uint8_t> out_b(in_b.size());
  auto first = c.all_gather(a, in_a.data(), bytes, out_a.data());
  auto second = c.all_reduce(b, in_b.data(), out_b.data(), count, ReduceDType::kF32);
  KILN_RETURN_IF_ERROR(second->wait());
  KILN_RETURN_IF_ERROR(first->wait());
  KILN_RETURN_IF_ERROR(first->wait());  // a second wait returns at once
  std::vector<uint8_t> want_a;
  for (int64_t d : a) {
    std::vector<uint8_t> part = bytes_of(d, seed, bytes);
    want_a.insert(want_a.end(), part.begin(), part.end());
  }
  KILN_RETURN_IF_ERROR(compare("async all_gather", a, c.device(), out_a, want_a));
  return compare("async all_reduce", b, c.device(), out_b,
                 expected_sum(b, seed + 1, count, 0, count, ReduceDType::kF32));
}

Result<std::vector<uint8_t>> all_reduce_bits(Collectives& c, const Group& group, size_t count,
                                             ReduceDType dtype, uint64_t seed) {
  std::vector<uint8_t> in = elements_of(c.device(), seed, count, dtype);
  std::vector<uint8_t> out(in.size());
  KILN_RETURN_IF_ERROR(c.all_reduce(group, in.data(), out.data(), count, dtype)->wait());
  return out;
}

Status check_everything(Collectives& c, int64_t inner) {
  int64_t n = c.num_devices();
  Group all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<Group> groups = {inner_group(c.device(), inner), outer_group(c.device(), n, inner), all};
  uint64_t seed = 1;
  for (const Group& g : groups) {
    ++seed;
    // Odd sizes: segments of unequal length, and counts that are not multiples of a block.
    KILN_RETURN_IF_ERROR(check_all_gather(c, g, 1001, seed));
    KILN_RETURN_IF_ERROR(check_all_gather_blocked(c, g, 7 * 143, 7, seed));
    for (ReduceDType t : {ReduceDType::kF32, ReduceDType::kBF16, ReduceDType::kS32, ReduceDType::kF64}) {
      KILN_RETURN_IF_ERROR(check_reduce_scatter(c, g, 1500, t, seed));
      KILN_RETURN_IF_ERROR(check_reduce_scatter_blocked(c, g, 5 * 301, 5, t, seed));
      KILN_RETURN_IF_ERROR(check_all_reduce(c, g, 2053, t, seed, /*in_place=*/false));
      KILN_RETURN_IF_ERROR(check_all_reduce(c, g, 7, t, seed, /*in_place=*/true));
    }
    KILN_RETURN_IF_ERROR(check_all_to_all(c, g, 333, seed));
    KILN_RETURN_IF_ERROR(check_ragged_all_to_all(c, g, seed));
    KILN_RETURN_IF_ERROR(c.barrier(g));
  }
  return check_async_reverse_wait(c, groups[0], groups[1], 99);
}

}  // namespace kiln::runtime::testing
