// Collective throughput on 32 MiB per device, next to one memcpy of that size: not a test
// (CTest does not run it), a measurement to reproduce the numbers in docs/sharding.md.
//   build-dir/tests/runtime/runtime_collective_bench                 # virtual devices 1, 2, 4
//   mpirun -np 2 build-dir/tests/runtime/runtime_collective_bench 2  # 2 ranks × 2 devices
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "kiln/runtime/local_world.h"
#include "kiln/runtime/mpi_world.h"
#include "kiln/runtime/run_on_devices.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void bench(World& w, const char* name) {
  const size_t count = size_t{8} << 20;  // f32 elements: 32 MiB per device
  const int64_t n = w.num_devices();
  Group all(n);
  std::iota(all.begin(), all.end(), 0);
  const char* kinds[] = {"all_gather", "reduce_scatter", "all_reduce"};
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<double> seconds(w.local_devices());
    Status s = run_on_devices(w, [&](int64_t l) -> Status {
      Collectives& c = w.device(l);
      // Buffers live across iterations, as the trainer's do: first-touch page faults are
      // paid in the untimed first iteration.
      std::vector<float> in(count * (kind == 1 ? n : 1), 1.5f), out(count * (kind == 0 ? n : 1));
      double start = 0;
      for (int it = 0; it < 4; ++it) {
        if (it == 1) start = now_s();
        std::unique_ptr<Pending> p =
            kind == 0   ? c.all_gather(all, in.data(), count * 4, out.data())
            : kind == 1 ? c.reduce_scatter(all, in.data(), out.data(), count, ReduceDType::kF32)
                        : c.all_reduce(all, in.data(), out.data(), count, ReduceDType::kF32);
        KILN_RETURN_IF_ERROR(p->wait());
      }
      seconds[l] = (now_s() - start) / 3;
      return ok_status();
    });
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.to_string().c_str());
      return;
    }
    if (w.rank() == 0) {
      std::printf("%-6s %lld devices  %-14s 32 MiB/device  %7.1f ms\n", name,
                  static_cast<long long>(n), kinds[kind], seconds[0] * 1e3);
    }
  }
  if (w.rank() == 0) {
    std::vector<char> a(count * 4, 1), b(count * 4);
    std::memcpy(b.data(), a.data(), a.size());
    double start = now_s();
    for (int i = 0; i < 3; ++i) std::memcpy(b.data(), a.data(), a.size());
    std::printf("%-6s memcpy of 32 MiB on one thread           %7.1f ms\n", "", (now_s() - start) / 3 * 1e3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    auto w = MpiWorld::create(std::atoi(argv[1]));
    if (!w.ok()) {
      std::fprintf(stderr, "%s\n", w.status().to_string().c_str());
      return 1;
    }
    bench(**w, "mpi");
    return 0;
  }
  for (int64_t n : {1, 2, 4}) {
    LocalWorld w(n);
    bench(w, "local");
  }
  return 0;
}
