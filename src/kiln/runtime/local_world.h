// N virtual devices in this process ("local_devices=N"): each device is driven by its own
// thread (run_on_devices) and collectives move data through shared memory, with no staging
// copies: each member reads the others' buffers directly once all have arrived, then waits
// until the others are done reading its own.
#pragma once

#include <memory>
#include <vector>

#include "kiln/runtime/collectives.h"

namespace kiln::runtime {

class LocalWorld final : public World {
 public:
  // A malformed KILN_COLLECTIVE_TIMEOUT_S falls back to the default with a warning; call
  // resolve_timeout_s first to report it as an error (make_world does).
  explicit LocalWorld(int64_t num_devices, Options options = {});
  ~LocalWorld() override;

  int64_t rank() const override { return 0; }
  int64_t num_ranks() const override { return 1; }
  int64_t local_devices() const override { return static_cast<int64_t>(devices_.size()); }
  Collectives& device(int64_t id) override;
  void abort(const Status& why) override;
  double timeout_s() const { return timeout_s_; }

  struct Shared;  // the rendezvous table, its lock and the wake-up condition

 private:
  double timeout_s_;
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Collectives>> devices_;
};

}  // namespace kiln::runtime
