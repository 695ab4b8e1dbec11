// One device's in-flight collectives and the loop that waits for them. Waiting on any one
// advances all of them (in start order), so a device may wait for its collectives in any
// order without deadlock: while it waits for B, it still does its part of A that the others
// need. Every wait has a deadline; at expiry the error names the device that did not arrive.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "kiln/runtime/collectives.h"

namespace kiln::runtime {

using Clock = std::chrono::steady_clock;

// A collective as seen by one member. Subclasses hold the world-specific state.
class Op {
 public:
  Op(const char* kind, Group group) : kind_(kind), group_(std::move(group)) {}
  virtual ~Op() = default;
  // Does whatever part of this device's work is possible now, without blocking. Returns true
  // when this device's part is complete (its buffers are no longer touched by anyone).
  // `waiting`: the device is blocked in a wait and would otherwise sleep, so it may do work
  // that a slow member would do itself later (LocalWorld: a busy peer's copy).
  virtual Result<bool> advance(bool waiting) = 0;
  // The global id of the member this op is waiting on now, for timeout messages.
  virtual int64_t blocked_on() const = 0;
  // The device gave up on this op (timeout or error elsewhere): afterwards nobody may touch
  // this device's buffers; other members must fail rather than wait for it.
  virtual void abandon(const Status& why) {}

  const char* kind() const { return kind_; }
  const Group& group() const { return group_; }
  // "all_gather over devices [0,1]"
  std::string describe() const;

  bool finished = false;  // done or failed: not advanced again
  Status status;          // the error when it failed

 private:
  const char* kind_;
  Group group_;
};

// How a device blocks between two attempts to advance (a condition variable for threads of
// one process, a short sleep while MPI progresses in the background).
class Waiter {
 public:
  virtual ~Waiter() = default;
  // A counter that changes whenever something another device did may let an op advance.
  virtual uint64_t epoch() = 0;
  // Blocks until epoch() != seen, `until`, or a short while has passed, whichever is first.
  virtual void sleep(uint64_t seen, Clock::time_point until) = 0;
  // Non-empty once the world was aborted: every wait fails with it.
  virtual Status aborted() = 0;
  // A wait begins (lets a polling waiter spin briefly before it starts sleeping).
  virtual void begin_wait() {}
};

class Engine {
 public:
  Engine(Waiter* waiter, double timeout_s) : waiter_(waiter), timeout_s_(timeout_s) {}
  ~Engine();
  // Registers a started op, advances it once and returns its handle.
  std::unique_ptr<Pending> submit(std::shared_ptr<Op> op);
  // Submits and waits at once (barrier).
  Status run(std::shared_ptr<Op> op);
  Status wait(Op& op);
  // One non-blocking pass over the started ops (what a wait does between sleeps).
  void progress() {
    if (!pending_.empty()) advance_all(false);
  }
  double timeout_s() const { return timeout_s_; }
  double wait_seconds() const { return wait_seconds_; }

 private:
  void advance_all(bool waiting);
  void abandon_all(const Status& why);

  Waiter* waiter_;
  double timeout_s_;
  std::deque<std::shared_ptr<Op>> pending_;  // start order
  double wait_seconds_ = 0;
};

}  // namespace kiln::runtime
