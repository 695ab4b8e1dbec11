// The device mesh described by the ici_*/dcn_* parallelism keys, with MaxText's axis names
// and its "-1 fills the rest" rule. spmd/ builds its partitioner mesh from this.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::config {

struct Mesh {
  std::vector<std::string> axes;  // in mesh_axes order
  std::vector<int64_t> ici;       // size within a slice, per axis, after the -1 fill
  std::vector<int64_t> dcn;       // size across slices, per axis, after the -1 fill

  // ici × dcn of `axis`; 1 for an axis name that is not in the mesh.
  int64_t size(std::string_view axis) const;
  // ici × dcn per axis, in `axes` order.
  std::vector<int64_t> shape() const;
  int64_t num_devices() const;
  // "fsdp=2 expert=2" (axes of size 1 left out; "1 device" when all are 1).
  std::string to_string() const;
};

// The mesh axes Kiln knows, in MaxText's order (MT-2602 naming, with `sequence`).
const std::vector<std::string>& known_mesh_axes();

// The key that sizes `axis` at `level` ("ici" or "dcn"). MaxText names the `stage` axis's
// keys after pipelining: parallelism_key("stage", "ici") == "ici_pipeline_parallelism".
std::string parallelism_key(std::string_view axis, std::string_view level);

// MaxText's fill rule, applied to each level separately: at most one size may be -1 and is
// replaced by count / (product of the others), which must be a whole number; the sizes
// must then multiply to exactly `devices_per_slice` (ici) and `num_slices` (dcn).
// `device_note` explains where the device count came from ("local_devices=4"); it is
// appended to the one-line error messages.
Result<Mesh> fill_mesh(const std::vector<std::string>& axes, const std::vector<int64_t>& ici,
                       const std::vector<int64_t>& dcn, int64_t devices_per_slice,
                       int64_t num_slices, std::string_view device_note);

}  // namespace kiln::config
