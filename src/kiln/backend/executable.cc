// What every Executable has by default (host-resident values, one device per execution), and
// the per-device views of an executable that runs all devices at once.
#include <condition_variable>
#include <mutex>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"

namespace kiln::backend {

Result<std::unique_ptr<DeviceValue>> Executable::to_device(Buffer host, int replica) const {
  if (replica != 0) return internal_error("this executable runs one device; replica {} asked for", replica);
  return std::unique_ptr<DeviceValue>(std::make_unique<HostValue>(std::move(host)));
}

Result<DeviceValues> Executable::run_on_device(std::span<DeviceValue* const> args) {
  std::vector<Buffer> host;
  host.reserve(args.size());
  for (const DeviceValue* a : args) {
    // Host backends' values are host Buffers: handed over without a copy.
    if (a->host() != nullptr) {
      host.push_back(*a->host());
    } else {
      KILN_ASSIGN_OR_RETURN(Buffer b, a->to_host());
      host.push_back(std::move(b));
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Buffer> outputs, run(host));
  DeviceValues values;
  values.reserve(outputs.size());
  for (Buffer& b : outputs) values.push_back(std::make_unique<HostValue>(std::move(b)));
  return values;
}

Result<std::vector<DeviceValues>> Executable::run_replicas_on_device(
    const std::vector<std::vector<DeviceValue*>>& args) {
  if (args.size() != 1) return internal_error("this executable runs one device, not {}", args.size());
  KILN_ASSIGN_OR_RETURN(DeviceValues values, run_on_device(args[0]));
  std::vector<DeviceValues> out;
  out.push_back(std::move(values));
  return out;
}

Result<std::vector<Buffer>> run_through_device(Executable& exe, std::span<const Buffer> args) {
  DeviceValues placed;
  std::vector<DeviceValue*> pointers;
  for (const Buffer& a : args) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceValue> b, exe.to_device(a));
    pointers.push_back(b.get());
    placed.push_back(std::move(b));
  }
  KILN_ASSIGN_OR_RETURN(DeviceValues out, exe.run_on_device(pointers));
  std::vector<Buffer> host;
  for (const auto& v : out) {
    KILN_ASSIGN_OR_RETURN(Buffer b, v->to_host());
    host.push_back(std::move(b));
  }
  return host;
}

namespace {

// Where the devices' threads meet: each posts its arguments; the last to arrive runs the
// execution for all, and every one takes its own results (or the shared error).
class Rendezvous {
 public:
  explicit Rendezvous(std::shared_ptr<Executable> exe) : exe_(std::move(exe)), args_(exe_->num_replicas()) {}
  Executable& executable() const { return *exe_; }

  Result<DeviceValues> run(int replica, std::span<DeviceValue* const> args) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t generation = generation_;
    args_[replica].assign(args.begin(), args.end());
    if (++arrived_ == exe_->num_replicas()) {
      Result<std::vector<DeviceValues>> r = exe_->run_replicas_on_device(args_);
      status_ = r.status();
      if (r.ok()) results_ = std::move(*r);
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
    if (!status_.ok()) return status_;
    return std::move(results_.at(replica));
  }

 private:
  std::shared_ptr<Executable> exe_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<DeviceValue*>> args_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  Status status_;
  std::vector<DeviceValues> results_;
};

// Replica `replica` of an executable that runs every device at once, as an executable of its
// own: what a per-device runner (one thread per device) drives.
class ReplicaView final : public Executable {
 public:
  ReplicaView(std::shared_ptr<Rendezvous> rendezvous, int replica)
      : rendezvous_(std::move(rendezvous)), replica_(replica) {}

  Result<std::vector<Buffer>> run(std::span<const Buffer> args) override { return run_through_device(*this, args); }
  const CompileReport& report() const override { return rendezvous_->executable().report(); }
  std::vector<const ir::Instr*> schedule() const override { return rendezvous_->executable().schedule(); }
  Result<std::unique_ptr<DeviceValue>> to_device(Buffer host, int replica = 0) const override {
    if (replica != 0) return internal_error("a replica's view places values on its own device only");
    return rendezvous_->executable().to_device(std::move(host), replica_);
  }
  Result<DeviceValues> run_on_device(std::span<DeviceValue* const> args) override {
    return rendezvous_->run(replica_, args);
  }

 private:
  std::shared_ptr<Rendezvous> rendezvous_;
  int replica_;
};

}  // namespace

std::vector<std::unique_ptr<Executable>> replica_views(std::unique_ptr<Executable> exe) {
  const int replicas = exe->num_replicas();
  auto rendezvous = std::make_shared<Rendezvous>(std::shared_ptr<Executable>(std::move(exe)));
  std::vector<std::unique_ptr<Executable>> views;
  for (int r = 0; r < replicas; ++r) views.push_back(std::make_unique<ReplicaView>(rendezvous, r));
  return views;
}

}  // namespace kiln::backend
