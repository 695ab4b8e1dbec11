#include "kiln/spmd/sharding_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/check.h"

namespace kiln::spmd {

bool Spec::is_replicated() const {
  if (!partial.empty()) return false;
  for (const Axes& a : dims) {
    if (!a.empty()) return false;
  }
  return true;
}

std::set<std::string> Spec::used_axes() const {
  std::set<std::string> used(partial.begin(), partial.end());
  for (const Axes& a : dims) used.insert(a.begin(), a.end());
  return used;
}

int64_t Spec::num_shards(const config::Mesh& mesh) const {
  int64_t n = 1;
  for (const Axes& a : dims) n *= mesh.size(a);
  return n;
}

ir::Shape Spec::local_shape(const ir::Shape& global, const config::Mesh& mesh) const {
  KILN_CHECK_EQ(global.rank(), rank()) << global.to_string() << " vs " << to_string();
  std::vector<int64_t> dims_out = global.dims();
  for (int d = 0; d < rank(); ++d) {
    int64_t n = mesh.size(dims[d]);
    KILN_CHECK_EQ(dims_out[d] % n, 0) << "dimension " << d << " of " << global.to_string() << " over " << n
                                      << " devices";
    dims_out[d] /= n;
  }
  return global.with_dims(std::move(dims_out));
}

std::string Spec::to_string() const {
  std::string s = to_ir().to_string();
  if (!partial.empty()) s += fmt::format(" partial=[{}]", fmt::join(partial, ","));
  return s;
}

}  // namespace kiln::spmd
