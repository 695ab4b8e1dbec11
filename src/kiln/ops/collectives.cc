// The collective interface's own code (collectives.h): the reduce types, group names, and the
// default blocked all-gather and reduce-scatter: a world whose transport takes contiguous
// parts only (MPI's collectives) gets the packed copy here, around its contiguous form. The
// staging lives in the returned Pending until the wait.
//   all_gather_blocked:     in [outer][b] -> staged [rank][outer][b] -> out [outer][rank][b]
//   reduce_scatter_blocked: in [outer][rank][c] -> staged [rank][outer][c] -> out [outer][c]
#include "kiln/ops/collectives.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <memory>

namespace kiln::ops {

size_t reduce_dtype_size(ReduceDType dtype) {
  switch (dtype) {
    case ReduceDType::kF32: return 4;
    case ReduceDType::kF64: return 8;
    case ReduceDType::kBF16: return 2;
    case ReduceDType::kS32: return 4;
  }
  return 0;
}

const char* reduce_dtype_name(ReduceDType dtype) {
  switch (dtype) {
    case ReduceDType::kF32: return "f32";
    case ReduceDType::kF64: return "f64";
    case ReduceDType::kBF16: return "bf16";
    case ReduceDType::kS32: return "s32";
  }
  return "?";
}

std::string group_to_string(const Group& group) { return fmt::format("[{}]", fmt::join(group, ",")); }

namespace {

// Waits for the contiguous collective, then (once) scatters the staged parts into place.
class StagedPending final : public Pending {
 public:
  StagedPending(std::unique_ptr<Pending> inner, std::unique_ptr<std::byte[]> staged, void* out,
                size_t members, size_t outer, size_t block)
      : staged_(std::move(staged)), inner_(std::move(inner)), out_(static_cast<std::byte*>(out)),
        members_(members), outer_(outer), block_(block) {}

  Status wait() override {
    Status s = inner_->wait();
    if (!s.ok() || out_ == nullptr) return s;
    for (size_t r = 0; r < members_; ++r) {
      for (size_t o = 0; o < outer_; ++o) {
        std::memcpy(out_ + (o * members_ + r) * block_, staged_.get() + (r * outer_ + o) * block_, block_);
      }
    }
    out_ = nullptr;  // unpacked: a second wait returns at once
    staged_.reset();
    return s;
  }

 private:
  std::unique_ptr<std::byte[]> staged_;  // declared first: outlives inner_
  std::unique_ptr<Pending> inner_;
  std::byte* out_;  // null: nothing (more) to unpack
  size_t members_, outer_, block_;
};

}  // namespace

std::unique_ptr<Pending> Collectives::all_gather_blocked(const Group& group, const void* in,
                                                         size_t bytes, void* out, size_t outer) {
  if (outer <= 1 || group.size() <= 1) return all_gather(group, in, bytes, out);
  auto staged = std::make_unique_for_overwrite<std::byte[]>(bytes * group.size());
  std::unique_ptr<Pending> inner = all_gather(group, in, bytes, staged.get());
  return std::make_unique<StagedPending>(std::move(inner), std::move(staged), out, group.size(), outer,
                                         bytes / outer);
}

std::unique_ptr<Pending> Collectives::reduce_scatter_blocked(const Group& group, const void* in,
                                                             void* out, size_t count,
                                                             ReduceDType dtype, size_t outer) {
  const size_t n = group.size();
  if (outer <= 1 || n <= 1) return reduce_scatter(group, in, out, count, dtype);
  const size_t block = count / outer * reduce_dtype_size(dtype);
  auto staged = std::make_unique_for_overwrite<std::byte[]>(block * outer * n);
  const auto* from = static_cast<const std::byte*>(in);
  for (size_t r = 0; r < n; ++r) {
    for (size_t o = 0; o < outer; ++o) {
      std::memcpy(staged.get() + (r * outer + o) * block, from + (o * n + r) * block, block);
    }
  }
  std::unique_ptr<Pending> inner = reduce_scatter(group, staged.get(), out, count, dtype);
  // Nothing to unpack: each rank's chunk of the staging is already [outer][c].
  return std::make_unique<StagedPending>(std::move(inner), std::move(staged), nullptr, n, outer, block);
}

}  // namespace kiln::ops
