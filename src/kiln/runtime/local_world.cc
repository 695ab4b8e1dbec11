#include "kiln/runtime/local_world.h"

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include "kiln/base/check.h"
#include "kiln/base/logging.h"
#include "kiln/runtime/engine.h"
#include "kiln/runtime/reduce.h"

namespace kiln::runtime {
namespace {

enum class Kind { kAllGather, kReduceScatter, kAllReduce, kAllToAll, kRagged, kBarrier };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllGather: return "all_gather";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kAllReduce: return "all_reduce";
    case Kind::kAllToAll: return "all_to_all";
    case Kind::kRagged: return "ragged_all_to_all";
    case Kind::kBarrier: return "barrier";
  }
  return "?";
}

// One member's arguments.
struct Slot {
  bool arrived = false;
  bool read_claimed = false;  // some member is doing (or did) this member's read
  bool read_done = false;
  bool copy_done = false;  // all_reduce only
  const void* in = nullptr;
  void* out = nullptr;
  std::vector<size_t> send_offsets, send_bytes, recv_offsets;  // ragged only
  std::vector<size_t>* recv_bytes = nullptr;
};

// One collective instance, shared by its members: (group, n-th collective on that group).
struct Rendezvous {
  Kind kind;
  size_t size = 0;  // bytes (all_gather, all_to_all) or elements (reductions)
  size_t outer = 1;  // blocks per part (the blocked all_gather / reduce_scatter)
  ReduceDType dtype = ReduceDType::kF32;
  std::vector<Slot> slots;
  size_t arrived = 0;
  size_t read_done = 0;  // members done reading the others' inputs
  size_t copy_done = 0;  // all_reduce: members done copying the others' reduced segments
  int readers_active = 0;  // members copying out of others' buffers right now
  Status failed;           // a member gave up or called something else
};

}  // namespace

struct LocalWorld::Shared final : Waiter {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t epoch_ = 0;
  Status abort_status;
  std::map<std::pair<Group, int64_t>, std::shared_ptr<Rendezvous>> open;  // not all arrived yet

  void bump() {  // with mu held
    ++epoch_;
    cv.notify_all();
  }
  uint64_t epoch() override {
    std::lock_guard<std::mutex> lock(mu);
    return epoch_;
  }
  void sleep(uint64_t seen, Clock::time_point until) override {
    std::unique_lock<std::mutex> lock(mu);
    // Bounded so a wake-up lost to an exotic path costs at most this much.
    auto limit = std::min(until, Clock::now() + std::chrono::milliseconds(100));
    cv.wait_until(lock, limit, [&] { return epoch_ != seen || !abort_status.ok(); });
  }
  Status aborted() override {
    std::lock_guard<std::mutex> lock(mu);
    return abort_status;
  }
};

namespace {

using Shared = LocalWorld::Shared;

class LocalOp final : public Op {
 public:
  LocalOp(Kind kind, Group group, size_t rank, Shared* shared, std::shared_ptr<Rendezvous> rv)
      : Op(kind_name(kind), std::move(group)), rank_(rank), shared_(shared), rv_(std::move(rv)) {}

  Result<bool> advance(bool waiting) override {
    std::unique_lock<std::mutex> lock(shared_->mu);
    Rendezvous& rv = *rv_;
    if (!rv.failed.ok()) return rv.failed;
    size_t n = rv.slots.size();
    if (rv.arrived < n) return false;
    if (!rv.slots[rank_].read_claimed) read_for(rank_, lock);
    // Blocked on members that have not read yet (busy in a kernel): rather than sleep until
    // they come back, do their reads into their own outs, which are reserved for this
    // collective until their waits. Not while merely progressing: that would move the copy
    // work onto this device while it has compute of its own to run.
    for (size_t j = 0; waiting && j < n && rv.read_done < n; ++j) {
      if (!rv.slots[j].read_claimed) read_for(j, lock);
    }
    if (rv.read_done < n) return false;
    if (rv.kind != Kind::kAllReduce) return true;
    // all_reduce, second step: every member has summed its segment into its own out, and
    // nobody reads the inputs any more (so out may alias in): fetch the other segments.
    if (!copied_) {
      copied_ = true;
      ++rv.readers_active;
      lock.unlock();
      size_t es = reduce_dtype_size(rv.dtype);
      char* out = static_cast<char*>(rv.slots[rank_].out);
      for (size_t j = 0; j < n; ++j) {
        Segment seg = segment_of(rv.size, n, j);
        if (j != rank_ && seg.end > seg.begin) {
          std::memcpy(out + seg.begin * es,
                      static_cast<const char*>(rv.slots[j].out) + seg.begin * es,
                      (seg.end - seg.begin) * es);
        }
      }
      lock.lock();
      --rv.readers_active;
      rv.slots[rank_].copy_done = true;
      ++rv.copy_done;
      shared_->bump();
    }
    return rv.copy_done == n;  // then nobody reads our out any more
  }

  int64_t blocked_on() const override {
    std::lock_guard<std::mutex> lock(shared_->mu);
    for (size_t i = 0; i < rv_->slots.size(); ++i) {
      if (!rv_->slots[i].arrived) return group()[i];
    }
    for (size_t i = 0; i < rv_->slots.size(); ++i) {
      if (!rv_->slots[i].read_done) return group()[i];
    }
    for (size_t i = 0; i < rv_->slots.size(); ++i) {
      if (!rv_->slots[i].copy_done) return group()[i];
    }
    return group()[rank_];
  }

  // Member r's read, done by this thread with `lock` (on the world's mutex) released.
  void read_for(size_t r, std::unique_lock<std::mutex>& lock) {
    Rendezvous& rv = *rv_;
    rv.slots[r].read_claimed = true;
    ++rv.readers_active;
    lock.unlock();
    read(r);  // the members' buffers stay valid: every one waits for read_done == n
    lock.lock();
    --rv.readers_active;
    rv.slots[r].read_done = true;
    ++rv.read_done;
    shared_->bump();
  }

  void abandon(const Status& why) override {
    std::unique_lock<std::mutex> lock(shared_->mu);
    // A member copying out of our buffers finishes first (a memcpy away).
    shared_->cv.wait(lock, [&] { return rv_->readers_active == 0; });
    if (rv_->failed.ok()) {
      rv_->failed = failed_precondition("{} failed: device {} gave up: {}", describe(),
                                        group()[rank_], why.message());
    }
    shared_->bump();
  }

 private:
  // Fills member r's out from every member's in (r's part of the collective).
  void read(size_t r) {
    Rendezvous& rv = *rv_;
    size_t n = rv.slots.size();
    Slot& me = rv.slots[r];
    char* out = static_cast<char*>(me.out);
    auto in_of = [&](size_t i) { return static_cast<const char*>(rv.slots[i].in); };
    switch (rv.kind) {
      case Kind::kAllGather: {
        // out [outer][n][b] from every in [outer][b]
        size_t b = rv.size / rv.outer;
        for (size_t o = 0; o < rv.outer; ++o) {
          for (size_t i = 0; i < n; ++i) {
            char* to = out + (o * n + i) * b;
            const char* from = in_of(i) + o * b;
            if (to != from) std::memcpy(to, from, b);
          }
        }
        break;
      }
      case Kind::kReduceScatter: {
        // out [outer][c] = sum over members of their in [outer][n][c] at column r
        size_t es = reduce_dtype_size(rv.dtype), c = rv.size / rv.outer;
        std::vector<const void*> srcs(n);
        for (size_t o = 0; o < rv.outer; ++o) {
          for (size_t i = 0; i < n; ++i) srcs[i] = in_of(i) + (o * n + r) * c * es;
          sum_in_rank_order(rv.dtype, srcs.data(), n, out + o * c * es, c);
        }
        break;
      }
      case Kind::kAllReduce: {
        // Segment r of our own out: nobody else reads it now, and if out aliases in, the
        // others read only their own segments of it.
        size_t es = reduce_dtype_size(rv.dtype);
        Segment seg = segment_of(rv.size, n, r);
        std::vector<const void*> srcs(n);
        for (size_t i = 0; i < n; ++i) srcs[i] = in_of(i) + seg.begin * es;
        sum_in_rank_order(rv.dtype, srcs.data(), n, out + seg.begin * es, seg.end - seg.begin);
        break;
      }
      case Kind::kAllToAll:
        for (size_t i = 0; i < n; ++i) std::memcpy(out + i * rv.size, in_of(i) + r * rv.size, rv.size);
        break;
      case Kind::kRagged:
        for (size_t i = 0; i < n; ++i) {
          const Slot& s = rv.slots[i];
          size_t bytes = s.send_bytes[r];
          if (bytes > 0) std::memcpy(out + me.recv_offsets[i], in_of(i) + s.send_offsets[r], bytes);
          (*me.recv_bytes)[i] = bytes;
        }
        break;
      case Kind::kBarrier: break;
    }
  }

  size_t rank_;
  Shared* shared_;
  std::shared_ptr<Rendezvous> rv_;
  bool copied_ = false;
};

// A collective that failed before it started (bad group or sizes).
class FailedPending final : public Pending {
 public:
  explicit FailedPending(Status s) : status_(std::move(s)) {}
  Status wait() override { return status_; }

 private:
  Status status_;
};

class LocalCollectives final : public Collectives, public Waiter {
 public:
  LocalCollectives(int64_t device, int64_t num_devices, Shared* shared, double timeout_s)
      : device_(device), num_devices_(num_devices), shared_(shared), engine_(this, timeout_s) {}

  int64_t device() const override { return device_; }
  double wait_seconds() const override { return engine_.wait_seconds(); }
  void progress() override { engine_.progress(); }
  int64_t num_devices() const override { return num_devices_; }

  // Waiter: the world's condition variable.
  uint64_t epoch() override { return shared_->epoch(); }
  void sleep(uint64_t seen, Clock::time_point until) override { shared_->sleep(seen, until); }
  Status aborted() override { return shared_->aborted(); }

  std::unique_ptr<Pending> all_gather(const Group& group, const void* in, size_t bytes,
                                      void* out) override {
    return all_gather_blocked(group, in, bytes, out, 1);
  }
  std::unique_ptr<Pending> reduce_scatter(const Group& group, const void* in, void* out,
                                          size_t count, ReduceDType dtype) override {
    return reduce_scatter_blocked(group, in, out, count, dtype, 1);
  }
  // Strided parts are copied (summed) straight into place: no staging.
  std::unique_ptr<Pending> all_gather_blocked(const Group& group, const void* in, size_t bytes,
                                              void* out, size_t outer) override {
    if (outer == 0 || bytes % outer != 0) return fail(Kind::kAllGather, group, blocks_error(bytes, outer));
    Slot s;
    s.in = in;
    s.out = out;
    return start(Kind::kAllGather, group, bytes, ReduceDType::kF32, std::move(s), outer);
  }
  std::unique_ptr<Pending> reduce_scatter_blocked(const Group& group, const void* in, void* out,
                                                  size_t count, ReduceDType dtype, size_t outer) override {
    if (outer == 0 || count % outer != 0) return fail(Kind::kReduceScatter, group, blocks_error(count, outer));
    Slot s;
    s.in = in;
    s.out = out;
    return start(Kind::kReduceScatter, group, count, dtype, std::move(s), outer);
  }
  std::unique_ptr<Pending> all_reduce(const Group& group, const void* in, void* out, size_t count,
                                      ReduceDType dtype) override {
    Slot s;
    s.in = in;
    s.out = out;
    return start(Kind::kAllReduce, group, count, dtype, std::move(s));
  }
  std::unique_ptr<Pending> all_to_all(const Group& group, const void* in, void* out,
                                      size_t chunk_bytes) override {
    Slot s;
    s.in = in;
    s.out = out;
    return start(Kind::kAllToAll, group, chunk_bytes, ReduceDType::kF32, std::move(s));
  }
  std::unique_ptr<Pending> ragged_all_to_all(const Group& group, const void* in,
                                             const std::vector<size_t>& send_offsets,
                                             const std::vector<size_t>& send_bytes, void* out,
                                             const std::vector<size_t>& recv_offsets,
                                             std::vector<size_t>* recv_bytes) override {
    size_t n = group.size();
    if (send_offsets.size() != n || send_bytes.size() != n || recv_offsets.size() != n ||
        recv_bytes == nullptr) {
      return std::make_unique<FailedPending>(invalid_argument(
          "ragged_all_to_all over devices {}: send_offsets, send_bytes and recv_offsets need "
          "one entry per member ({}) and recv_bytes a vector",
          group_to_string(group), n));
    }
    recv_bytes->assign(n, 0);
    Slot s;
    s.in = in;
    s.out = out;
    s.send_offsets = send_offsets;
    s.send_bytes = send_bytes;
    s.recv_offsets = recv_offsets;
    s.recv_bytes = recv_bytes;
    return start(Kind::kRagged, group, 0, ReduceDType::kF32, std::move(s));
  }
  Status barrier(const Group& group) override {
    return start(Kind::kBarrier, group, 0, ReduceDType::kF32, Slot())->wait();
  }

 private:
  static std::string blocks_error(size_t size, size_t outer) {
    return fmt::format("{} blocks do not divide the part of {}", outer, size);
  }

  std::unique_ptr<Pending> start(Kind kind, const Group& group, size_t size, ReduceDType dtype,
                                 Slot slot, size_t outer = 1) {
    size_t n = group.size(), rank = n;
    for (size_t i = 0; i < n; ++i) {
      if (group[i] < 0 || group[i] >= num_devices_) {
        return fail(kind, group, fmt::format("device {} is not in this world of {} devices",
                                             group[i], num_devices_));
      }
      for (size_t j = 0; j < i; ++j) {
        if (group[j] == group[i]) return fail(kind, group, fmt::format("device {} appears twice", group[i]));
      }
      if (group[i] == device_) rank = i;
    }
    if (rank == n) return fail(kind, group, fmt::format("device {} is not a member", device_));

    int64_t seq = next_seq_[group]++;
    std::shared_ptr<Rendezvous> rv;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      auto key = std::make_pair(group, seq);
      auto it = shared_->open.find(key);
      if (it == shared_->open.end()) {
        rv = std::make_shared<Rendezvous>();
        rv->kind = kind;
        rv->size = size;
        rv->outer = outer;
        rv->dtype = dtype;
        rv->slots.resize(n);
        it = shared_->open.emplace(key, rv).first;
      } else {
        rv = it->second;
      }
      if (rv->failed.ok() &&
          (rv->kind != kind || rv->size != size || rv->dtype != dtype || rv->outer != outer)) {
        rv->failed = failed_precondition(
            "collective #{} over devices {}: device {} called {} (size {}, {}, {} blocks) but an "
            "earlier member called {} (size {}, {}, {} blocks); every member must call the same "
            "collectives in the same order",
            seq, group_to_string(group), device_, kind_name(kind), size, reduce_dtype_name(dtype), outer,
            kind_name(rv->kind), rv->size, reduce_dtype_name(rv->dtype), rv->outer);
      }
      slot.arrived = true;
      rv->slots[rank] = std::move(slot);
      if (++rv->arrived == n) shared_->open.erase(it);
      shared_->bump();
    }
    return engine_.submit(std::make_shared<LocalOp>(kind, group, rank, shared_, std::move(rv)));
  }

  std::unique_ptr<Pending> fail(Kind kind, const Group& group, const std::string& why) {
    return std::make_unique<FailedPending>(invalid_argument(
        "{} over devices {} on device {}: {}", kind_name(kind), group_to_string(group), device_, why));
  }

  int64_t device_;
  int64_t num_devices_;
  Shared* shared_;
  Engine engine_;
  std::map<Group, int64_t> next_seq_;
};

}  // namespace

LocalWorld::LocalWorld(int64_t num_devices, Options options) : shared_(std::make_unique<Shared>()) {
  KILN_CHECK(num_devices >= 1) << "LocalWorld needs at least one device, got " << num_devices;
  Result<double> t = resolve_timeout_s(options);
  if (!t.ok()) KILN_LOG(WARNING) << t.status().message() << "; using " << kDefaultCollectiveTimeoutS << " s";
  timeout_s_ = t.ok() ? *t : kDefaultCollectiveTimeoutS;
  for (int64_t d = 0; d < num_devices; ++d) {
    devices_.push_back(std::make_unique<LocalCollectives>(d, num_devices, shared_.get(), timeout_s_));
  }
}

LocalWorld::~LocalWorld() { devices_.clear(); }

Collectives& LocalWorld::device(int64_t id) {
  KILN_CHECK(id >= 0 && id < local_devices()) << "device " << id << " of " << local_devices();
  return *devices_[id];
}

void LocalWorld::abort(const Status& why) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (shared_->abort_status.ok()) shared_->abort_status = why;
  shared_->bump();
}

}  // namespace kiln::runtime
