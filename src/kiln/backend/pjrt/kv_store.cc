#include "kiln/backend/pjrt/kv_store.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::backend::pjrt {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// "'gpu:local_topology/cuda/1'", cut short: keys are the plugin's, and a message stays one line.
std::string quoted(std::string_view key) {
  std::string out(key.substr(0, 200));
  std::replace(out.begin(), out.end(), '\n', ' ');
  return "'" + out + (key.size() > 200 ? "...'" : "'");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// LocalKvStore

Status LocalKvStore::put(std::string_view key, std::string_view value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return failed_precondition("pjrt key-value store: put of key {} after the store closed", quoted(key));
  values_.insert_or_assign(std::string(key), std::string(value));
  cv_.notify_all();
  return ok_status();
}

Result<std::string> LocalKvStore::get(std::string_view key, milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const Clock::time_point deadline = Clock::now() + timeout;
  auto found = values_.end();
  cv_.wait_until(lock, deadline, [&] {
    found = values_.find(key);
    return found != values_.end() || closed_;
  });
  if (found != values_.end()) return found->second;
  if (closed_) return failed_precondition("pjrt key-value store: get of key {} after the store closed", quoted(key));
  return not_found("pjrt key-value store: no process put key {} within {} ms", quoted(key), timeout.count());
}

Result<std::string> LocalKvStore::try_get(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = values_.find(key); it != values_.end()) return it->second;
  return not_found("pjrt key-value store: no key {}", quoted(key));
}

void LocalKvStore::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// MpiKvStore: the wire format and the two sides (rank 0's service, the other ranks' requests)

namespace {

enum class Op : uint8_t { kPut = 1, kGet = 2, kTryGet = 3, kBye = 4 };
enum class Answer : uint8_t { kValue = 0, kMissing = 1, kClosed = 2 };

constexpr int kRequestTag = 1;      // requests, to rank 0
constexpr int kFirstAnswerTag = 2;  // answers: one tag per request, from here to MPI_TAG_UB
// How long past its own timeout a request waits for rank 0's answer (rank 0 answers a get
// when its timeout passes, so only a rank 0 that stopped serving makes this wait).
constexpr milliseconds kAnswerGrace{30000};
// How long rank 0 keeps serving after its own close() for the ranks that have not closed.
constexpr milliseconds kCloseGrace{10000};

// A request: op (1 byte), answer tag (int32), timeout in ms (int64), key size (uint64), the
// key, then the value (the rest).
struct Request {
  Op op = Op::kPut;
  int32_t answer_tag = 0;
  int64_t timeout_ms = 0;
  std::string key, value;
};

template <typename T>
void append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
bool take(std::string_view& in, T* v) {
  if (in.size() < sizeof *v) return false;
  std::memcpy(v, in.data(), sizeof *v);
  in.remove_prefix(sizeof *v);
  return true;
}

std::string encode(const Request& r) {
  std::string out;
  append(out, r.op);
  append(out, r.answer_tag);
  append(out, r.timeout_ms);
  append(out, static_cast<uint64_t>(r.key.size()));
  out += r.key;
  out += r.value;
  return out;
}

bool decode(std::string_view in, Request* r) {
  uint64_t key_size = 0;
  if (!take(in, &r->op) || !take(in, &r->answer_tag) || !take(in, &r->timeout_ms) || !take(in, &key_size) ||
      key_size > in.size()) {
    return false;
  }
  r->key.assign(in.substr(0, key_size));
  r->value.assign(in.substr(key_size));
  return true;
}

// Sleeps a little longer each time nothing happened: 50 us up to 1 ms, so an answer is seen
// within a millisecond and an idle wait costs no core.
class Backoff {
 public:
  void reset() { us_ = 50; }
  void wait() {
    std::this_thread::sleep_for(std::chrono::microseconds(us_));
    us_ = std::min(us_ * 2, 1000);
  }

 private:
  int us_ = 50;
};

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, length);
}

}  // namespace

struct MpiKvStore::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int answer_tags = 1;  // how many tags answers cycle through
  std::atomic<uint32_t> next_answer{0};
  LocalKvStore map;  // rank 0's
  std::thread service;
  std::atomic<bool> closing{false};
  std::atomic<int> calls_in_flight{0};  // other ranks' calls now talking to rank 0
  int self_keyval = MPI_KEYVAL_INVALID;
  std::mutex close_mu;
  bool closed = false;

  // --- rank 0 ---

  // An answer in flight: MPI_Isend needs its bytes until it completes (a list, so they stay put).
  struct Outgoing {
    std::string bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  // A get waiting for its key.
  struct Waiting {
    int source = 0, tag = 0;
    std::string key;
    Clock::time_point deadline;
  };

  void answer(std::list<Outgoing>& out, int dest, int tag, Answer a, std::string_view value) {
    Outgoing& o = out.emplace_back();
    o.bytes.push_back(static_cast<char>(a));
    o.bytes.append(value);
    // An error leaves the asker to its own deadline; nothing better to do from this thread.
    if (MPI_Isend(o.bytes.data(), static_cast<int>(o.bytes.size()), MPI_BYTE, dest, tag, comm, &o.request) !=
        MPI_SUCCESS) {
      o.request = MPI_REQUEST_NULL;
    }
  }

  void serve() {
    std::list<Outgoing> out;
    std::vector<Waiting> waiting;
    int closed_ranks = 0;
    Clock::time_point stop_at = Clock::time_point::max();
    Backoff backoff;
    std::string bytes;
    while (true) {
      bool busy = false;
      // New requests first (at most a batch, so waiting gets and sends get their turn).
      for (int i = 0; i < 64; ++i) {
        int flag = 0;
        MPI_Status status;
        if (MPI_Iprobe(MPI_ANY_SOURCE, kRequestTag, comm, &flag, &status) != MPI_SUCCESS || !flag) break;
        busy = true;
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        bytes.resize(static_cast<size_t>(count));
        if (MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, kRequestTag, comm, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS) {
          continue;
        }
        Request r;
        if (!decode(bytes, &r)) continue;  // not from a Kiln rank: nobody to answer
        const int source = status.MPI_SOURCE;
        switch (r.op) {
          case Op::kPut:
            answer(out, source, r.answer_tag, map.put(r.key, r.value).ok() ? Answer::kValue : Answer::kClosed, "");
            break;
          case Op::kGet:
          case Op::kTryGet:
            if (Result<std::string> v = map.try_get(r.key); v.ok()) {
              answer(out, source, r.answer_tag, Answer::kValue, *v);
            } else if (r.op == Op::kTryGet || r.timeout_ms <= 0) {
              answer(out, source, r.answer_tag, Answer::kMissing, "");
            } else {
              waiting.push_back({source, r.answer_tag, std::move(r.key), Clock::now() + milliseconds(r.timeout_ms)});
            }
            break;
          case Op::kBye:
            ++closed_ranks;
            break;
        }
      }
      // Waiting gets whose key came (from any rank, rank 0 itself included) or whose time is up.
      const Clock::time_point now = Clock::now();
      std::erase_if(waiting, [&](Waiting& w) {
        Result<std::string> v = map.try_get(w.key);
        if (!v.ok() && now < w.deadline) return false;
        answer(out, w.source, w.tag, v.ok() ? Answer::kValue : Answer::kMissing, v.ok() ? *v : "");
        busy = true;
        return true;
      });
      std::erase_if(out, [](Outgoing& o) {
        int done = 1;
        if (o.request != MPI_REQUEST_NULL) MPI_Test(&o.request, &done, MPI_STATUS_IGNORE);
        return done != 0;
      });
      if (closing.load()) {
        if (stop_at == Clock::time_point::max()) stop_at = Clock::now() + kCloseGrace;
        if ((closed_ranks == size - 1 && waiting.empty() && out.empty()) || Clock::now() > stop_at) break;
      }
      if (busy) {
        backoff.reset();
      } else {
        backoff.wait();
      }
    }
    // Past the grace period: whoever still waits learns the store closed; sends that cannot
    // complete are let go (MPI finishes or drops them), their bytes leaked on purpose (a list
    // moved keeps its nodes where they are).
    for (const Waiting& w : waiting) answer(out, w.source, w.tag, Answer::kClosed, "");
    for (Outgoing& o : out) {
      if (o.request != MPI_REQUEST_NULL) MPI_Request_free(&o.request);
    }
    if (!out.empty()) new std::list<Outgoing>(std::move(out));  // NOLINT: see above
  }

  // --- ranks other than 0 ---

  // Sends `r` to rank 0 and, unless it is a bye, waits for the answer until `deadline`.
  Result<std::pair<Answer, std::string>> call(Request r, Clock::time_point deadline) {
    const bool bye = r.op == Op::kBye;
    // close() waits for the calls in flight to leave before it frees the communicator.
    calls_in_flight.fetch_add(1);
    struct Leave {
      std::atomic<int>& n;
      ~Leave() { n.fetch_sub(1); }
    } leave{calls_in_flight};
    if (!bye && closing.load()) {
      return failed_precondition("pjrt key-value store (rank {}): key {} asked for after the store closed", rank,
                                 quoted(r.key));
    }
    r.answer_tag = kFirstAnswerTag + static_cast<int>(next_answer.fetch_add(1) % static_cast<uint32_t>(answer_tags));
    auto bytes = std::make_unique<std::string>(encode(r));
    MPI_Request send = MPI_REQUEST_NULL;
    if (int rc = MPI_Isend(bytes->data(), static_cast<int>(bytes->size()), MPI_BYTE, 0, kRequestTag, comm, &send);
        rc != MPI_SUCCESS) {
      return internal_error("pjrt key-value store (rank {}): sending a request to rank 0 failed: {}", rank,
                            mpi_error(rc));
    }
    Backoff backoff;
    int sent = 0;
    std::string answer;
    bool answered = bye;
    while (!sent || !answered) {
      if (!sent) MPI_Test(&send, &sent, MPI_STATUS_IGNORE);
      if (!answered) {
        int flag = 0;
        MPI_Status status;
        MPI_Iprobe(0, r.answer_tag, comm, &flag, &status);
        if (flag) {
          int count = 0;
          MPI_Get_count(&status, MPI_BYTE, &count);
          answer.resize(static_cast<size_t>(count));
          if (int rc = MPI_Recv(answer.data(), count, MPI_BYTE, 0, r.answer_tag, comm, MPI_STATUS_IGNORE);
              rc != MPI_SUCCESS || count < 1) {
            return internal_error("pjrt key-value store (rank {}): receiving rank 0's answer failed: {}", rank,
                                  rc != MPI_SUCCESS ? mpi_error(rc) : "empty message");
          }
          answered = true;
          continue;
        }
      }
      const bool closed_meanwhile = !bye && closing.load();
      if (Clock::now() > deadline || closed_meanwhile) {
        if (!sent) {
          // The request's bytes must outlive the send, which rank 0 may no longer take.
          MPI_Request_free(&send);
          (void)bytes.release();
        }
        if (closed_meanwhile) {
          return failed_precondition("pjrt key-value store (rank {}): the store closed while key {} was awaited", rank,
                                     quoted(r.key));
        }
        return failed_precondition("pjrt key-value store (rank {}): rank 0 did not answer for key {} (has it stopped "
                                   "serving, or left the job?)",
                                   rank, quoted(r.key));
      }
      backoff.wait();
    }
    if (bye) return std::make_pair(Answer::kValue, std::string());
    return std::make_pair(static_cast<Answer>(answer[0]), answer.substr(1));
  }

  // --- both ---

  // `in_finalize`: called from MPI_Finalize, where MPI still works whatever MPI_Finalized says.
  void close(bool in_finalize = false) {
    std::lock_guard<std::mutex> lock(close_mu);
    if (closed) return;
    closed = true;
    closing.store(true);
    int finalized = 0;
    if (!in_finalize) MPI_Finalized(&finalized);
    if (finalized) return;  // MPI is gone: nothing can be said or freed any more
    if (rank == 0) {
      if (service.joinable()) service.join();
    } else {
      Request bye;
      bye.op = Op::kBye;
      (void)call(std::move(bye), Clock::now() + kCloseGrace);
      // Calls in flight saw `closing` and leave within a poll (a millisecond).
      while (calls_in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    map.close();
    MPI_Comm_free(&comm);
  }

  // MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still works: the store
  // closes there if its owner has not closed it yet.
  static int on_finalize(MPI_Comm, int, void* impl, void*) {
    static_cast<Impl*>(impl)->close(/*in_finalize=*/true);
    return MPI_SUCCESS;
  }
};

MpiKvStore::MpiKvStore() : impl_(std::make_unique<Impl>()) {}

Result<std::unique_ptr<MpiKvStore>> MpiKvStore::create() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return failed_precondition("the MPI key-value store needs MPI running (under mpirun, Kiln's MPI world "
                               "initialises it); MPI is {}",
                               finalized ? "finalized" : "not initialised");
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    return failed_precondition("the MPI key-value store needs MPI_THREAD_MULTIPLE (the PJRT plugin calls it from "
                               "threads of its own); this MPI was initialised with thread level {}",
                               provided);
  }
  std::unique_ptr<MpiKvStore> store(new MpiKvStore());
  Impl& impl = *store->impl_;
  if (int rc = MPI_Comm_dup(MPI_COMM_WORLD, &impl.comm); rc != MPI_SUCCESS) {
    return internal_error("the MPI key-value store: MPI_Comm_dup failed: {}", mpi_error(rc));
  }
  // Errors come back as codes (turned into Status), not as an abort inside MPI.
  MPI_Comm_set_errhandler(impl.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(impl.comm, &impl.rank);
  MPI_Comm_size(impl.comm, &impl.size);
  void* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(impl.comm, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  // The standard promises tags up to 32767 at least.
  impl.answer_tags = (has_tag_ub ? *static_cast<int*>(tag_ub) : 32767) - kFirstAnswerTag + 1;
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &Impl::on_finalize, &impl.self_keyval, nullptr);
  MPI_Comm_set_attr(MPI_COMM_SELF, impl.self_keyval, &impl);
  if (impl.rank == 0 && impl.size > 1) impl.service = std::thread([&impl] { impl.serve(); });
  return store;
}

MpiKvStore::~MpiKvStore() {
  impl_->close();
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (!finalized && impl_->self_keyval != MPI_KEYVAL_INVALID) {
    // Deleting the attribute calls on_finalize, which finds the store closed already.
    MPI_Comm_delete_attr(MPI_COMM_SELF, impl_->self_keyval);
    MPI_Comm_free_keyval(&impl_->self_keyval);
  }
  // A service thread still running here means MPI was finalized under it; it stops at its
  // next look at `closing` (set by close()) but may be inside MPI: leave it rather than join.
  if (impl_->service.joinable()) impl_->service.detach();
}

int MpiKvStore::rank() const { return impl_->rank; }
int MpiKvStore::num_ranks() const { return impl_->size; }
void MpiKvStore::close() { impl_->close(); }

Status MpiKvStore::put(std::string_view key, std::string_view value) {
  if (impl_->rank == 0) return impl_->map.put(key, value);
  Request r;
  r.op = Op::kPut;
  r.key = key;
  r.value = value;
  KILN_ASSIGN_OR_RETURN(auto answer, impl_->call(std::move(r), Clock::now() + kAnswerGrace));
  if (answer.first != Answer::kValue) {
    return failed_precondition("pjrt key-value store (rank {}): put of key {} after rank 0 closed the store",
                               impl_->rank, quoted(key));
  }
  return ok_status();
}

Result<std::string> MpiKvStore::get(std::string_view key, milliseconds timeout) {
  auto missing = [&] {
    return not_found("pjrt key-value store (rank {}): no rank put key {} within {} ms (is a rank missing, or stuck "
                     "before this point?)",
                     impl_->rank, quoted(key), timeout.count());
  };
  if (impl_->rank == 0) {
    Result<std::string> value = impl_->map.get(key, timeout);
    if (!value.ok() && value.status().code() == StatusCode::kNotFound) return missing();
    return value;
  }
  Request r;
  r.op = Op::kGet;
  r.timeout_ms = timeout.count();
  r.key = key;
  KILN_ASSIGN_OR_RETURN(auto answer, impl_->call(std::move(r), Clock::now() + timeout + kAnswerGrace));
  switch (answer.first) {
    case Answer::kValue: return std::move(answer.second);
    case Answer::kMissing: return missing();
    case Answer::kClosed: break;
  }
  return failed_precondition("pjrt key-value store (rank {}): rank 0 closed the store while key {} was awaited",
                             impl_->rank, quoted(key));
}

Result<std::string> MpiKvStore::try_get(std::string_view key) {
  if (impl_->rank == 0) return impl_->map.try_get(key);
  Request r;
  r.op = Op::kTryGet;
  r.key = key;
  KILN_ASSIGN_OR_RETURN(auto answer, impl_->call(std::move(r), Clock::now() + kAnswerGrace));
  switch (answer.first) {
    case Answer::kValue: return std::move(answer.second);
    case Answer::kMissing: return not_found("pjrt key-value store (rank {}): no key {}", impl_->rank, quoted(key));
    case Answer::kClosed: break;
  }
  return failed_precondition("pjrt key-value store (rank {}): rank 0 closed the store while key {} was asked for",
                             impl_->rank, quoted(key));
}

// ---------------------------------------------------------------------------------------------
// PjrtKvCallbacks

namespace {

void delete_value(char* value) { delete[] value; }

// A copy of `value` the plugin frees with delete_value (the header: the plugin copies the
// value, then calls the deleter handed back with it).
char* plugin_copy(const std::string& value) {
  char* out = new char[std::max<size_t>(value.size(), 1)];
  std::memcpy(out, value.data(), value.size());
  return out;
}

PJRT_Error* plugin_error(PJRT_CallbackError* make_error, PJRT_Error_Code code, const Status& status) {
  const std::string& message = status.message();
  return (*make_error)(code, message.data(), message.size());
}

PJRT_Error_Code error_code(const Status& status) {
  return status.code() == StatusCode::kFailedPrecondition ? PJRT_Error_Code_FAILED_PRECONDITION
                                                          : PJRT_Error_Code_INTERNAL;
}

// A get's answer (PJRT_KeyValueGetCallback_Args or ..TryGet..): the value, copied for the
// plugin, or the error, a missing key reported as `missing`.
template <typename Args>
PJRT_Error* answer(Args* args, const Result<std::string>& value, PJRT_Error_Code missing) {
  if (!value.ok()) {
    const PJRT_Error_Code code = value.status().code() == StatusCode::kNotFound ? missing : error_code(value.status());
    return plugin_error(args->callback_error, code, value.status());
  }
  args->value = plugin_copy(*value);
  args->value_size = value->size();
  args->value_deleter_callback = &delete_value;
  return nullptr;
}

}  // namespace

void PjrtKvCallbacks::install(PJRT_Client_Create_Args& args) {
  args.kv_get_callback = &PjrtKvCallbacks::get;
  args.kv_get_user_arg = this;
  args.kv_put_callback = &PjrtKvCallbacks::put;
  args.kv_put_user_arg = this;
  args.kv_try_get_callback = &PjrtKvCallbacks::try_get;
  args.kv_try_get_user_arg = this;
}

PJRT_Error* PjrtKvCallbacks::get(PJRT_KeyValueGetCallback_Args* args) {
  const auto* self = static_cast<const PjrtKvCallbacks*>(args->user_arg);
  Result<std::string> value = self->store_->get(self->key(args->key, args->key_size), milliseconds(args->timeout_in_ms));
  return answer(args, value, PJRT_Error_Code_DEADLINE_EXCEEDED);
}

PJRT_Error* PjrtKvCallbacks::try_get(PJRT_KeyValueTryGetCallback_Args* args) {
  const auto* self = static_cast<const PjrtKvCallbacks*>(args->user_arg);
  Result<std::string> value = self->store_->try_get(self->key(args->key, args->key_size));
  return answer(args, value, PJRT_Error_Code_NOT_FOUND);
}

PJRT_Error* PjrtKvCallbacks::put(PJRT_KeyValuePutCallback_Args* args) {
  const auto* self = static_cast<const PjrtKvCallbacks*>(args->user_arg);
  Status status = self->store_->put(self->key(args->key, args->key_size), std::string_view(args->value, args->value_size));
  if (!status.ok()) return plugin_error(args->callback_error, error_code(status), status);
  return nullptr;
}

}  // namespace kiln::backend::pjrt
