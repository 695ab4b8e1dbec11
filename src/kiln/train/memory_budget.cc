#include "kiln/train/memory_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace kiln::train {
namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

// A "Name:   123 kB" field of /proc/self/status or /proc/meminfo, in bytes (-1: absent).
int64_t proc_field(const char* path, const std::string& name) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(name.size() + 1));
    int64_t kib = -1;
    fields >> kib;
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

int64_t read_number(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stoll(text);
  } catch (...) {
    return -1;
  }
}

// The memory cgroup's limit and usage (v2, then v1), each -1 when unknown or unlimited.
std::pair<int64_t, int64_t> cgroup_memory() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // v2: "0::/path"; v1: "4:memory:/path".
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      const int64_t max = read_number("/sys/fs/cgroup" + path + "/memory.max");
      if (max > 0) return {max, read_number("/sys/fs/cgroup" + path + "/memory.current")};
    } else if (controllers == "memory") {
      for (const std::string& dir : {"/sys/fs/cgroup/memory" + path, std::string("/sys/fs/cgroup/memory")}) {
        const int64_t max = read_number(dir + "/memory.limit_in_bytes");
        // v1 reports "no limit" as a huge page-rounded number.
        if (max > 0 && max < (int64_t{1} << 60)) return {max, read_number(dir + "/memory.usage_in_bytes")};
      }
    }
  }
  return {-1, -1};
}

}  // namespace

int64_t current_resident_bytes() { return std::max<int64_t>(0, proc_field("/proc/self/status", "VmRSS")); }

MemoryLimit process_memory_limit() {
  MemoryLimit best;
  auto consider = [&](int64_t left, std::string what) {
    if (left < 0) left = 0;
    if (best.bytes < 0 || left < best.bytes) best = {left, std::move(what)};
  };
  struct rlimit r;
  if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    const int64_t used = std::max<int64_t>(0, proc_field("/proc/self/status", "VmSize"));
    consider(static_cast<int64_t>(r.rlim_cur) - used,
             fmt::format("address-space limit (RLIMIT_AS) {:.2f} GiB, {:.2f} GiB mapped", gib(r.rlim_cur), gib(used)));
  }
  if (getrlimit(RLIMIT_DATA, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    const int64_t used = std::max<int64_t>(0, proc_field("/proc/self/status", "VmData"));
    consider(static_cast<int64_t>(r.rlim_cur) - used,
             fmt::format("data-size limit (RLIMIT_DATA) {:.2f} GiB, {:.2f} GiB in use", gib(r.rlim_cur), gib(used)));
  }
  const auto [max, current] = cgroup_memory();
  if (max > 0) {
    consider(max - std::max<int64_t>(0, current),
             fmt::format("cgroup memory limit {:.2f} GiB, {:.2f} GiB in use", gib(max), gib(std::max<int64_t>(0, current))));
  }
  const int64_t available = proc_field("/proc/meminfo", "MemAvailable");
  if (available >= 0) consider(available, fmt::format("available memory {:.2f} GiB", gib(available)));
  return best;
}

int64_t device_memory_budget(int64_t local_devices) {
  const MemoryLimit limit = process_memory_limit();
  if (limit.bytes <= 0 || local_devices < 1) return 0;
  return static_cast<int64_t>(static_cast<double>(limit.bytes) / kMemoryHeadroom / static_cast<double>(local_devices));
}

DeviceNeed device_need(const backend::CompileReport& plan, int64_t state_bytes, int64_t threads_per_device) {
  DeviceNeed need;
  need.state_bytes = state_bytes;
  need.other_bytes = std::max<int64_t>(0, plan.planned_peak_bytes - state_bytes);
  // Each worker thread's stack is private writable memory (counted by RLIMIT_DATA and the
  // address-space limit): the stack size limit, 8 MiB by default.
  struct rlimit r;
  int64_t stack = int64_t{8} << 20;
  if (getrlimit(RLIMIT_STACK, &r) == 0 && r.rlim_cur != RLIM_INFINITY) stack = static_cast<int64_t>(r.rlim_cur);
  need.thread_bytes = std::max<int64_t>(1, threads_per_device) * stack;
  return need;
}

Status check_memory(const MemoryCheckInput& in, const MemoryLimit& limit) {
  const int64_t need = in.per_device.total() * in.local_devices;
  // The plan comes within 10% of measured peaks (allocator and MPI overheads it does not
  // model); a run that would need more than the limit at that margin is refused.
  auto fits = [&](int64_t bytes) { return static_cast<double>(bytes) * kMemoryHeadroom <= static_cast<double>(limit.bytes); };
  if (limit.bytes < 0 || fits(need)) return ok_status();
  // What would fit: one device per process, the state split over more fsdp devices (the
  // rest of the need does not shrink with fsdp); else fewer saved activations.
  std::string fix;
  const int64_t rest = in.per_device.other_bytes + in.per_device.thread_bytes + in.per_device.runtime_bytes;
  // More fsdp only helps while the state dominates: past 64 devices per current one, the
  // rest of the need is the problem.
  int64_t f = std::max<int64_t>(1, in.fsdp);
  while (f < 64 * std::max<int64_t>(1, in.fsdp) && !fits(in.global_state_bytes / f + rest)) f *= 2;
  if (fits(in.global_state_bytes / f + rest)) {
    fix = fmt::format("ici_fsdp_parallelism={} with one device per process (local_devices=1, e.g. mpirun -np {}) "
                      "would need about {:.2f} GiB per process",
                      f, f, gib(in.global_state_bytes / f + rest));
  } else if (in.remat_policy != "full" && in.saved_activation_bytes > 0) {
    fix = fmt::format("even without the state, activations and temporaries need {:.2f} GiB: try remat_policy=full "
                      "(it drops most of the {:.2f} GiB saved for the backward pass) or a smaller "
                      "per_device_batch_size",
                      gib(rest), gib(in.saved_activation_bytes));
  } else {
    fix = fmt::format("even without the state, activations and temporaries need {:.2f} GiB: use a smaller "
                      "per_device_batch_size or max_target_length",
                      gib(rest));
  }
  return failed_precondition(
      "not enough memory: {} local device(s) × {:.2f} GiB (state {:.2f} GiB, activations and temporaries {:.2f} GiB, "
      "thread stacks {:.2f} GiB, collective buffers {:.2f} GiB; from the compiled plan) = {:.2f} GiB (+10% "
      "headroom), but this process may use {:.2f} GiB ({}); {}",
      in.local_devices, gib(in.per_device.total()), gib(in.per_device.state_bytes), gib(in.per_device.other_bytes),
      gib(in.per_device.thread_bytes), gib(in.per_device.runtime_bytes), gib(need), gib(limit.bytes), limit.what, fix);
}

}  // namespace kiln::train
