#include "kiln/runtime/engine.h"

#include <fmt/format.h>

namespace kiln::runtime {

std::string Op::describe() const { return fmt::format("{} over devices {}", kind_, group_to_string(group_)); }

namespace {

class EnginePending final : public Pending {
 public:
  EnginePending(Engine* engine, std::shared_ptr<Op> op) : engine_(engine), op_(std::move(op)) {}
  Status wait() override { return engine_->wait(*op_); }

 private:
  Engine* engine_;
  std::shared_ptr<Op> op_;
};

}  // namespace

Engine::~Engine() {
  // Ops started and never waited for: make sure no other device reads their buffers later.
  if (!pending_.empty()) abandon_all(failed_precondition("the device's collectives were destroyed"));
}

std::unique_ptr<Pending> Engine::submit(std::shared_ptr<Op> op) {
  pending_.push_back(op);
  advance_all(false);
  return std::make_unique<EnginePending>(this, std::move(op));
}

Status Engine::run(std::shared_ptr<Op> op) {
  Op& ref = *op;
  submit(std::move(op));
  return wait(ref);
}

void Engine::advance_all(bool waiting) {
  for (auto& op : pending_) {
    if (op->finished) continue;
    Result<bool> r = op->advance(waiting);
    if (!r.ok()) {
      op->status = r.status();
      op->finished = true;
      op->abandon(op->status);
    } else if (*r) {
      op->finished = true;
    }
  }
  while (!pending_.empty() && pending_.front()->finished) pending_.pop_front();
}

void Engine::abandon_all(const Status& why) {
  for (auto& op : pending_) {
    if (op->finished) continue;
    op->status = why;
    op->finished = true;
    op->abandon(why);
  }
  pending_.clear();
}

Status Engine::wait(Op& op) {
  if (op.finished) return op.status;  // already done: no clock reads on the fast path
  auto start = Clock::now();
  struct AddTime {  // counts every exit, the error ones too
    Clock::time_point start;
    double* total;
    ~AddTime() { *total += std::chrono::duration<double>(Clock::now() - start).count(); }
  } add_time{start, &wait_seconds_};
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeout_s_));
  waiter_->begin_wait();
  while (true) {
    uint64_t seen = waiter_->epoch();
    advance_all(true);
    if (op.finished) return op.status;
    if (Status a = waiter_->aborted(); !a.ok()) {
      abandon_all(a);
      return op.status;
    }
    if (Clock::now() >= deadline) {
      Status timeout = failed_precondition(
          "{} timed out after {:g} s waiting for device {} (is a rank dead?)", op.describe(),
          timeout_s_, op.blocked_on());
      abandon_all(timeout);
      return timeout;
    }
    waiter_->sleep(seen, deadline);
  }
}

}  // namespace kiln::runtime
