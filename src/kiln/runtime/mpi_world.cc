#include "kiln/runtime/mpi_world.h"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "kiln/base/check.h"
#include "kiln/runtime/engine.h"
#include "kiln/runtime/reduce.h"

namespace kiln::runtime {

// Shared by the devices of this rank: one communicator per (sending local device, receiving
// local device) pair, so that MPI's (source rank, tag, communicator) matching tells the
// devices of one rank apart; tags count the collectives each pair of devices has shared.
struct MpiWorld::Impl {
  std::vector<MPI_Comm> comms;  // [src_local * local_devices + dst_local]
  int64_t tag_span = 0;         // tags are (pair sequence % tag_span) * kPhases + phase
  std::mutex mu;
  Status abort_status;
};

namespace {

constexpr int kPhases = 2;
// MPI counts are ints: larger transfers go as several messages of at most this size, which
// MPI delivers in order between the same pair and tag.
constexpr size_t kMaxMessage = size_t{1} << 30;

Status mpi_error(int code, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return internal_error("{}: MPI error: {}", what, std::string(text, len));
}

class MpiCollectives;

// A collective as one member sees it: the requests of its current phase and what to do when
// they complete.
class MpiOp : public Op {
 public:
  MpiOp(const char* kind, Group group, MpiCollectives* dev, size_t rank)
      : Op(kind, std::move(group)), dev_(dev), rank_(rank) {}

  Result<bool> advance(bool /*waiting*/) override {
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool all, test_all());
      if (!all) return false;
      reqs_.clear();
      peers_.clear();
      is_recv_.clear();
      KILN_ASSIGN_OR_RETURN(bool done, next_phase());
      if (done) return true;
    }
  }

  int64_t blocked_on() const override {
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i] != MPI_REQUEST_NULL) return peers_[i];
    }
    return group()[rank_];
  }

  void abandon(const Status&) override {
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i] == MPI_REQUEST_NULL) continue;
      if (is_recv_[i]) MPI_Cancel(&reqs_[i]);  // no more writes into the caller's buffer
      MPI_Request_free(&reqs_[i]);
    }
    reqs_.clear();
    peers_.clear();
    is_recv_.clear();
  }

  // Assigns the pair tags and posts the first phase; called once by the device.
  Status start();

 protected:
  // Posts this phase's transfers; returns true when the op needs no more phases.
  virtual Result<bool> next_phase() = 0;

  Status send(const void* buf, size_t bytes, size_t to, int phase);
  Status recv(void* buf, size_t bytes, size_t from, int phase);
  size_t n() const { return group().size(); }

  MpiCollectives* dev_;
  size_t rank_;
  int step_ = 0;  // phases posted so far

 private:
  Result<bool> test_all() {
    bool all = true;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      MPI_Status st;
      int rc = MPI_Test(&reqs_[i], &flag, &st);
      if (rc != MPI_SUCCESS) return mpi_error(rc, fmt::format("{} with device {}", describe(), peers_[i]));
      if (!flag) all = false;
    }
    return all;
  }
  Status post(bool is_recv, void* buf, size_t bytes, size_t member, int phase);

  std::vector<MPI_Request> reqs_;
  std::vector<int64_t> peers_;
  std::vector<bool> is_recv_;
  std::vector<int> tags_;  // per member: this collective's base tag with that member
};

class MpiCollectives final : public Collectives, public Waiter {
 public:
  MpiCollectives(MpiWorld* world, MpiWorld::Impl* impl, int64_t local)
      : world_(world), impl_(impl), local_(local), device_(world->first_device() + local),
        pair_seq_(world->num_devices(), 0), engine_(this, world->timeout_s()) {}

  int64_t device() const override { return device_; }
  double wait_seconds() const override { return engine_.wait_seconds(); }
  void progress() override { engine_.progress(); }
  int64_t num_devices() const override { return world_->num_devices(); }

  uint64_t epoch() override { return 0; }
  void begin_wait() override { idle_rounds_ = 0; }
  void sleep(uint64_t, Clock::time_point until) override {
    // MPI progresses inside MPI_Test: poll often at first, then back off to spare the cores
    // the other devices compute on.
    if (++idle_rounds_ < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_until(std::min(until, Clock::now() + std::chrono::microseconds(50)));
    }
  }
  Status aborted() override {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->abort_status;
  }

  std::unique_ptr<Pending> all_gather(const Group& group, const void* in, size_t bytes,
                                      void* out) override;
  std::unique_ptr<Pending> reduce_scatter(const Group& group, const void* in, void* out,
                                          size_t count, ReduceDType dtype) override;
  std::unique_ptr<Pending> all_reduce(const Group& group, const void* in, void* out, size_t count,
                                      ReduceDType dtype) override;
  std::unique_ptr<Pending> all_to_all(const Group& group, const void* in, void* out,
                                      size_t chunk_bytes) override;
  std::unique_ptr<Pending> ragged_all_to_all(const Group& group, const void* in,
                                             const std::vector<size_t>& send_offsets,
                                             const std::vector<size_t>& send_bytes, void* out,
                                             const std::vector<size_t>& recv_offsets,
                                             std::vector<size_t>* recv_bytes) override;
  Status barrier(const Group& group) override;

  // Where messages between this device and global device `peer` go.
  int peer_rank(int64_t peer) const { return static_cast<int>(peer / world_->local_devices()); }
  MPI_Comm comm(int64_t from, int64_t to) const {
    int64_t l = world_->local_devices();
    return impl_->comms[(from % l) * l + (to % l)];
  }
  // Receive buffers for the reductions, reused from one collective to the next: fresh
  // memory costs a page fault per 4 KiB on first touch, which dwarfs the copy itself.
  std::vector<char> take_scratch(size_t bytes) {
    std::vector<char> buf;
    if (!scratch_pool_.empty()) {
      buf = std::move(scratch_pool_.back());
      scratch_pool_.pop_back();
    }
    if (buf.size() < bytes) buf.resize(bytes);
    return buf;
  }
  void give_back_scratch(std::vector<char> buf) {
    if (scratch_pool_.size() < kReductionScratchKept) scratch_pool_.push_back(std::move(buf));
  }

  // The next collective this device shares with `peer`, as a base tag (both sides count the
  // same collectives in the same order, so both compute the same tag).
  int next_tag(int64_t peer) {
    return static_cast<int>((pair_seq_[peer]++ % impl_->tag_span) * kPhases);
  }

 private:
  // Validates the group, finds this device's rank and starts `op` built from it.
  template <typename MakeOp>
  std::unique_ptr<Pending> start(const char* kind, const Group& group, MakeOp make);

  MpiWorld* world_;
  MpiWorld::Impl* impl_;
  int64_t local_;
  int64_t device_;
  std::vector<uint64_t> pair_seq_;
  std::vector<std::vector<char>> scratch_pool_;
  int idle_rounds_ = 0;
  Engine engine_;
};

Status MpiOp::start() {
  tags_.assign(n(), 0);
  for (size_t i = 0; i < n(); ++i) {
    if (i != rank_) tags_[i] = dev_->next_tag(group()[i]);
  }
  Result<bool> r = next_phase();
  return r.status();
}

Status MpiOp::post(bool is_recv, void* buf, size_t bytes, size_t member, int phase) {
  int64_t peer = group()[member];
  int64_t me = group()[rank_];
  MPI_Comm comm = is_recv ? dev_->comm(peer, me) : dev_->comm(me, peer);
  int tag = tags_[member] + phase;
  char* p = static_cast<char*>(buf);
  size_t left = bytes;
  do {  // a zero-byte message still goes (barrier, empty ragged headers are never zero)
    int len = static_cast<int>(std::min(left, kMaxMessage));
    MPI_Request req;
    int rc = is_recv ? MPI_Irecv(p, len, MPI_BYTE, dev_->peer_rank(peer), tag, comm, &req)
                     : MPI_Isend(p, len, MPI_BYTE, dev_->peer_rank(peer), tag, comm, &req);
    if (rc != MPI_SUCCESS) return mpi_error(rc, fmt::format("{} with device {}", describe(), peer));
    reqs_.push_back(req);
    peers_.push_back(peer);
    is_recv_.push_back(is_recv);
    p += len;
    left -= len;
  } while (left > 0);
  return ok_status();
}

Status MpiOp::send(const void* buf, size_t bytes, size_t to, int phase) {
  return post(false, const_cast<void*>(buf), bytes, to, phase);
}
Status MpiOp::recv(void* buf, size_t bytes, size_t from, int phase) {
  return post(true, buf, bytes, from, phase);
}

// out = concat of every member's in.
class AllGatherOp final : public MpiOp {
 public:
  AllGatherOp(Group g, MpiCollectives* d, size_t r, const void* in, size_t bytes, void* out)
      : MpiOp("all_gather", std::move(g), d, r), in_(in), bytes_(bytes), out_(static_cast<char*>(out)) {}
  Result<bool> next_phase() override {
    if (step_++ > 0) return true;
    if (out_ + rank_ * bytes_ != in_) std::memcpy(out_ + rank_ * bytes_, in_, bytes_);
    for (size_t j = 0; j < n(); ++j) {
      if (j == rank_) continue;
      KILN_RETURN_IF_ERROR(recv(out_ + j * bytes_, bytes_, j, 0));
      KILN_RETURN_IF_ERROR(send(in_, bytes_, j, 0));
    }
    return false;
  }

 private:
  const void* in_;
  size_t bytes_;
  char* out_;
};

// Chunk j of in goes to rank j; out chunk i came from rank i.
class AllToAllOp final : public MpiOp {
 public:
  AllToAllOp(Group g, MpiCollectives* d, size_t r, const void* in, size_t bytes, void* out)
      : MpiOp("all_to_all", std::move(g), d, r), in_(static_cast<const char*>(in)), bytes_(bytes),
        out_(static_cast<char*>(out)) {}
  Result<bool> next_phase() override {
    if (step_++ > 0) return true;
    std::memcpy(out_ + rank_ * bytes_, in_ + rank_ * bytes_, bytes_);
    for (size_t j = 0; j < n(); ++j) {
      if (j == rank_) continue;
      KILN_RETURN_IF_ERROR(recv(out_ + j * bytes_, bytes_, j, 0));
      KILN_RETURN_IF_ERROR(send(in_ + j * bytes_, bytes_, j, 0));
    }
    return false;
  }

 private:
  const char* in_;
  size_t bytes_;
  char* out_;
};

// reduce_scatter: phase 0 sends chunk j to rank j and gathers everyone's chunk r, which is
// then summed in rank order. all_reduce: the same over segments (segment_of), then phase 1
// sends the reduced segment r to every member and receives theirs, straight into out.
class ReduceOp final : public MpiOp {
 public:
  ReduceOp(bool all_reduce, Group g, MpiCollectives* d, size_t r, const void* in, void* out,
           size_t count, ReduceDType dtype)
      : MpiOp(all_reduce ? "all_reduce" : "reduce_scatter", std::move(g), d, r),
        all_reduce_(all_reduce), in_(static_cast<const char*>(in)), out_(static_cast<char*>(out)),
        count_(count), dtype_(dtype), es_(reduce_dtype_size(dtype)) {}

  Result<bool> next_phase() override {
    switch (step_++) {
      case 0: {
        Segment mine = part(rank_);
        size_t bytes = (mine.end - mine.begin) * es_;
        scratch_ = dev_->take_scratch(n() * bytes);
        for (size_t j = 0; j < n(); ++j) {
          if (j == rank_) continue;
          Segment s = part(j);
          KILN_RETURN_IF_ERROR(recv(scratch_.data() + j * bytes, bytes, j, 0));
          KILN_RETURN_IF_ERROR(send(in_ + s.begin * es_, (s.end - s.begin) * es_, j, 0));
        }
        return false;
      }
      case 1: {
        Segment mine = part(rank_);
        size_t bytes = (mine.end - mine.begin) * es_;
        std::vector<const void*> srcs(n());
        for (size_t j = 0; j < n(); ++j) {
          srcs[j] = j == rank_ ? static_cast<const void*>(in_ + mine.begin * es_) : scratch_.data() + j * bytes;
        }
        // reduce_scatter writes out[0, count); all_reduce its segment of out (may alias in:
        // safe, sum_in_rank_order reads each block before writing it).
        char* dst = all_reduce_ ? out_ + mine.begin * es_ : out_;
        sum_in_rank_order(dtype_, srcs.data(), n(), dst, mine.end - mine.begin);
        dev_->give_back_scratch(std::move(scratch_));
        scratch_ = {};
        if (!all_reduce_) return true;
        // Phase 0's sends out of `in` are complete, so receiving into out is safe when they alias.
        for (size_t j = 0; j < n(); ++j) {
          if (j == rank_) continue;
          Segment s = part(j);
          KILN_RETURN_IF_ERROR(recv(out_ + s.begin * es_, (s.end - s.begin) * es_, j, 1));
          KILN_RETURN_IF_ERROR(send(dst, bytes, j, 1));
        }
        return false;
      }
      default: return true;
    }
  }

 private:
  // reduce_scatter's parts are the whole chunks; all_reduce's are segments of count.
  Segment part(size_t j) const {
    if (all_reduce_) return segment_of(count_, n(), j);
    return {j * count_, (j + 1) * count_};
  }

  bool all_reduce_;
  const char* in_;
  char* out_;
  size_t count_;
  ReduceDType dtype_;
  size_t es_;
  std::vector<char> scratch_;
};

// Phase 0: every member tells every other how many bytes it sends (8-byte headers); once the
// headers are in, phase 1 posts the data sends and receives the data into out.
class RaggedOp final : public MpiOp {
 public:
  RaggedOp(Group g, MpiCollectives* d, size_t r, const void* in, std::vector<size_t> send_offsets,
           std::vector<size_t> send_bytes, void* out, std::vector<size_t> recv_offsets,
           std::vector<size_t>* recv_bytes)
      : MpiOp("ragged_all_to_all", std::move(g), d, r), in_(static_cast<const char*>(in)),
        send_offsets_(std::move(send_offsets)), send_bytes_(std::move(send_bytes)),
        out_(static_cast<char*>(out)), recv_offsets_(std::move(recv_offsets)),
        recv_bytes_(recv_bytes) {}

  Result<bool> next_phase() override {
    switch (step_++) {
      case 0:
        headers_out_.assign(send_bytes_.begin(), send_bytes_.end());
        headers_in_.assign(n(), 0);
        recv_bytes_->assign(n(), 0);
        (*recv_bytes_)[rank_] = send_bytes_[rank_];
        if (send_bytes_[rank_] > 0) {
          std::memcpy(out_ + recv_offsets_[rank_], in_ + send_offsets_[rank_], send_bytes_[rank_]);
        }
        for (size_t j = 0; j < n(); ++j) {
          if (j == rank_) continue;
          KILN_RETURN_IF_ERROR(recv(&headers_in_[j], sizeof(uint64_t), j, 0));
          KILN_RETURN_IF_ERROR(send(&headers_out_[j], sizeof(uint64_t), j, 0));
        }
        return false;
      case 1:
        // The data goes in the phase that also receives it: a message past MPI's eager limit
        // completes only once its receive is posted, so sends waited on in phase 0 would
        // deadlock two members sending each other large blocks.
        for (size_t j = 0; j < n(); ++j) {
          if (j == rank_) continue;
          (*recv_bytes_)[j] = headers_in_[j];
          if (headers_in_[j] > 0) KILN_RETURN_IF_ERROR(recv(out_ + recv_offsets_[j], headers_in_[j], j, 1));
          if (send_bytes_[j] > 0) KILN_RETURN_IF_ERROR(send(in_ + send_offsets_[j], send_bytes_[j], j, 1));
        }
        return false;
      default: return true;
    }
  }

 private:
  const char* in_;
  std::vector<size_t> send_offsets_, send_bytes_;
  char* out_;
  std::vector<size_t> recv_offsets_;
  std::vector<size_t>* recv_bytes_;
  std::vector<uint64_t> headers_out_, headers_in_;
};

// Zero-byte messages with every member.
class BarrierOp final : public MpiOp {
 public:
  BarrierOp(Group g, MpiCollectives* d, size_t r) : MpiOp("barrier", std::move(g), d, r) {}
  Result<bool> next_phase() override {
    if (step_++ > 0) return true;
    for (size_t j = 0; j < n(); ++j) {
      if (j == rank_) continue;
      KILN_RETURN_IF_ERROR(recv(&dummy_in_, 0, j, 0));
      KILN_RETURN_IF_ERROR(send(&dummy_out_, 0, j, 0));
    }
    return false;
  }

 private:
  char dummy_in_ = 0, dummy_out_ = 0;
};

class FailedPending final : public Pending {
 public:
  explicit FailedPending(Status s) : status_(std::move(s)) {}
  Status wait() override { return status_; }

 private:
  Status status_;
};

template <typename MakeOp>
std::unique_ptr<Pending> MpiCollectives::start(const char* kind, const Group& group, MakeOp make) {
  size_t n = group.size(), rank = n;
  std::string bad;
  for (size_t i = 0; i < n && bad.empty(); ++i) {
    if (group[i] < 0 || group[i] >= num_devices()) {
      bad = fmt::format("device {} is not in this world of {} devices", group[i], num_devices());
    }
    for (size_t j = 0; j < i && bad.empty(); ++j) {
      if (group[j] == group[i]) bad = fmt::format("device {} appears twice", group[i]);
    }
    if (group[i] == device_) rank = i;
  }
  if (bad.empty() && rank == n) bad = fmt::format("device {} is not a member", device_);
  if (!bad.empty()) {
    return std::make_unique<FailedPending>(invalid_argument(
        "{} over devices {} on device {}: {}", kind, group_to_string(group), device_, bad));
  }
  std::shared_ptr<MpiOp> op = make(rank);
  if (Status s = op->start(); !s.ok()) return std::make_unique<FailedPending>(s);
  return engine_.submit(std::move(op));
}

std::unique_ptr<Pending> MpiCollectives::all_gather(const Group& group, const void* in,
                                                    size_t bytes, void* out) {
  return start("all_gather", group, [&](size_t r) {
    return std::make_shared<AllGatherOp>(group, this, r, in, bytes, out);
  });
}

std::unique_ptr<Pending> MpiCollectives::reduce_scatter(const Group& group, const void* in,
                                                        void* out, size_t count, ReduceDType dtype) {
  return start("reduce_scatter", group, [&](size_t r) {
    return std::make_shared<ReduceOp>(false, group, this, r, in, out, count, dtype);
  });
}

std::unique_ptr<Pending> MpiCollectives::all_reduce(const Group& group, const void* in, void* out,
                                                    size_t count, ReduceDType dtype) {
  return start("all_reduce", group, [&](size_t r) {
    return std::make_shared<ReduceOp>(true, group, this, r, in, out, count, dtype);
  });
}

std::unique_ptr<Pending> MpiCollectives::all_to_all(const Group& group, const void* in, void* out,
                                                    size_t chunk_bytes) {
  return start("all_to_all", group, [&](size_t r) {
    return std::make_shared<AllToAllOp>(group, this, r, in, chunk_bytes, out);
  });
}

std::unique_ptr<Pending> MpiCollectives::ragged_all_to_all(
    const Group& group, const void* in, const std::vector<size_t>& send_offsets,
    const std::vector<size_t>& send_bytes, void* out, const std::vector<size_t>& recv_offsets,
    std::vector<size_t>* recv_bytes) {
  size_t n = group.size();
  if (send_offsets.size() != n || send_bytes.size() != n || recv_offsets.size() != n ||
      recv_bytes == nullptr) {
    return std::make_unique<FailedPending>(invalid_argument(
        "ragged_all_to_all over devices {}: send_offsets, send_bytes and recv_offsets need one "
        "entry per member ({}) and recv_bytes a vector",
        group_to_string(group), n));
  }
  return start("ragged_all_to_all", group, [&](size_t r) {
    return std::make_shared<RaggedOp>(group, this, r, in, send_offsets, send_bytes, out,
                                      recv_offsets, recv_bytes);
  });
}

Status MpiCollectives::barrier(const Group& group) {
  return start("barrier", group, [&](size_t r) { return std::make_shared<BarrierOp>(group, this, r); })->wait();
}

}  // namespace

Result<std::unique_ptr<MpiWorld>> MpiWorld::create(int64_t local_devices, Options options) {
  if (local_devices < 1) return invalid_argument("local_devices={}: expected at least 1", local_devices);
  KILN_ASSIGN_OR_RETURN(double timeout, resolve_timeout_s(options));
  std::unique_ptr<MpiWorld> w(new MpiWorld());
  w->local_devices_ = local_devices;
  w->timeout_s_ = timeout;
  w->impl_ = std::make_unique<Impl>();
  int initialized = 0, provided = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      return internal_error("MPI_Init_thread failed");
    }
    w->finalize_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    return failed_precondition(
        "this MPI provides thread level {} but Kiln's device threads need MPI_THREAD_MULTIPLE "
        "(Debian's OpenMPI has it)",
        provided);
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  w->rank_ = rank;
  w->num_ranks_ = size;
  void* ub = nullptr;
  int has_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &has_ub);
  int64_t tag_ub = has_ub ? *static_cast<int*>(ub) : 32767;
  w->impl_->tag_span = (tag_ub + 1) / kPhases;
  for (int64_t i = 0; i < local_devices * local_devices; ++i) {
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    // Errors come back as codes (turned into Status), not as an abort inside MPI.
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    w->impl_->comms.push_back(c);
  }
  for (int64_t l = 0; l < local_devices; ++l) {
    w->devices_.push_back(std::make_unique<MpiCollectives>(w.get(), w->impl_.get(), l));
  }
  return w;
}

MpiWorld::~MpiWorld() {
  devices_.clear();
  if (impl_) {
    for (MPI_Comm& c : impl_->comms) MPI_Comm_free(&c);
  }
  if (finalize_) MPI_Finalize();
}

Collectives& MpiWorld::device(int64_t local) {
  KILN_CHECK(local >= 0 && local < local_devices_) << "local device " << local << " of " << local_devices_;
  return *devices_[local];
}

void MpiWorld::abort(const Status& why) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->abort_status.ok()) impl_->abort_status = why;
}

void MpiWorld::abort_job(const Status& why, int exit_code) {
  std::fprintf(stderr, "kiln: error: rank %lld: %s\n", static_cast<long long>(rank_), why.message().c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace kiln::runtime
