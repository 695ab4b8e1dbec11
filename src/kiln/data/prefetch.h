// Background prefetch: a thread prepares the next `depth` batches while the step runs, so
// the step only waits for data when producing a batch is slower than a step.
//
//   Prefetcher<HostBatch> p([&](int64_t k) { return make_batch(k); }, /*first=*/k0, /*depth=*/2);
//   double wait_s;
//   HostBatch b = p.next(&wait_s);   // batch k0, then k0 + 1, ...; wait_s: time blocked here
//
// Batches come out in index order, whatever the depth: `produce(k)` is called once per k,
// in increasing k, on the prefetch thread only (so it may keep state, like a synthetic
// generator, and need not be thread-safe against itself). depth = 0 runs produce() inside
// next() on the caller's thread (the wait is then the whole production time).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace kiln::data {

template <typename T>
class Prefetcher {
 public:
  using Produce = std::function<T(int64_t)>;

  Prefetcher(Produce produce, int64_t first, int64_t depth)
      : produce_(std::move(produce)), next_(first), depth_(depth < 0 ? 0 : depth) {
    if (depth_ > 0) thread_ = std::thread([this] { loop(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next batch in order; *wait_s (if given) is how long this call blocked.
  T next(double* wait_s = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    T out;
    if (depth_ == 0) {
      out = produce_(next_++);
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !ready_.empty(); });
      out = std::move(ready_.front());
      ready_.pop_front();
      lock.unlock();
      cv_.notify_all();  // room for one more
    }
    if (wait_s != nullptr) *wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  int64_t depth() const { return depth_; }

 private:
  void loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || static_cast<int64_t>(ready_.size()) < depth_; });
        if (stop_) return;
      }
      T item = produce_(next_++);  // outside the lock: this is the slow part
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(std::move(item));
      }
      cv_.notify_all();
    }
  }

  Produce produce_;
  int64_t next_;  // touched only by the producing thread
  const int64_t depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> ready_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kiln::data
