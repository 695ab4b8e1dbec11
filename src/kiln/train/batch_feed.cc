#include "kiln/train/batch_feed.h"

#include <map>
#include <set>

#include "kiln/data/batch_split.h"

namespace kiln::train {
namespace {

// The micro-batches' rows one after the other: [k, count, T] (or [count, T] for one).
HostBatch stack(const std::vector<HostBatch>& parts, int64_t count, int64_t seq_len) {
  std::vector<int64_t> dims = {count, seq_len};
  if (parts.size() > 1) dims.insert(dims.begin(), static_cast<int64_t>(parts.size()));
  const ir::Shape shape(ir::DType::kS32, dims);
  auto field = [&](ir::Literal HostBatch::*member) {
    std::vector<double> values;
    values.reserve(static_cast<size_t>(shape.num_elements()));
    for (const HostBatch& p : parts) {
      const auto& v = (p.*member).values();
      values.insert(values.end(), v.begin(), v.end());
    }
    return ir::Literal(shape, std::move(values));
  };
  return {field(&HostBatch::inputs), field(&HostBatch::targets), field(&HostBatch::positions),
          field(&HostBatch::segmentation)};
}

}  // namespace

Result<BatchFeed> BatchFeed::make(const config::Config& config, int64_t first_device, int64_t local_devices) {
  const config::Derived& d = config.derived();
  BatchFeed feed;
  feed.micro_rows_ = d.micro_batch_size;
  feed.accumulation_ = config.get_int("gradient_accumulation_steps");
  feed.seq_len_ = config.get_int("max_target_length");
  if (d.num_devices <= 1) {
    feed.device_rows_.push_back({0, feed.micro_rows_});
    return feed;
  }
  data::BatchSplit split = data::make_batch_split(d.mesh, d.logical_axis_rules);
  KILN_RETURN_IF_ERROR(split.check_batch(feed.micro_rows_));
  for (int64_t l = 0; l < local_devices; ++l) feed.device_rows_.push_back(split.rows(feed.micro_rows_, first_device + l));
  return feed;
}

std::vector<HostBatch> BatchFeed::build(const RowSource& rows) const {
  // Devices that differ only along non-batch axes (tensor, ...) share their rows: made once.
  std::map<std::pair<int64_t, int64_t>, HostBatch> made;
  std::vector<HostBatch> out;
  for (const auto& range : device_rows_) {
    auto it = made.find(range);
    if (it == made.end()) {
      std::vector<HostBatch> parts;
      for (int64_t m = 0; m < accumulation_; ++m) parts.push_back(rows(m * micro_rows_ + range.first, range.second));
      it = made.emplace(range, stack(parts, range.second, seq_len_)).first;
    }
    out.push_back(it->second);
  }
  return out;
}

int64_t BatchFeed::rows_read() const {
  std::set<std::pair<int64_t, int64_t>> unique(device_rows_.begin(), device_rows_.end());
  int64_t n = 0;
  for (const auto& r : unique) n += r.second;
  return n * accumulation_;
}

}  // namespace kiln::train
