// Per-rank data: each process builds only the rows of the global batch that its devices
// consume. A device takes rows [first, first + count) of every micro-batch (its data shard,
// data/batch_split.h: the same global batches whatever the mesh), so a process reads
// 1 / (data shards) of the global batch when its devices form one shard. Accumulating
// gradients, the device's argument is [micro-batches, count, seq]: micro-batch m's rows are
// m·B + first .. m·B + first + count - 1 of the global batch (B rows per micro-batch).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/train/synthetic_data.h"

namespace kiln::train {

class BatchFeed {
 public:
  // first_device, local_devices: this process's devices in the mesh's numbering.
  static Result<BatchFeed> make(const config::Config& config, int64_t first_device, int64_t local_devices);

  // Rows [first, first + count) of the current global batch.
  using RowSource = std::function<HostBatch(int64_t first, int64_t count)>;
  // One batch per local device, shaped as that device's batch arguments.
  std::vector<HostBatch> build(const RowSource& rows) const;

  int64_t local_devices() const { return static_cast<int64_t>(device_rows_.size()); }
  // The global batch rows this process reads, per step.
  int64_t rows_read() const;

 private:
  int64_t micro_rows_ = 1, accumulation_ = 1, seq_len_ = 1;
  std::vector<std::pair<int64_t, int64_t>> device_rows_;  // per local device: (first, count) in a micro-batch
};

}  // namespace kiln::train
