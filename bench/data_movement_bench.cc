// The library data-movement kernels on the gpt-oss-small step's shapes (MoE gathers and
// combine, the loss gradient's one-hot, RoPE's slices/concatenations/pads, the transposes
// of the attention projections, the bf16 bias-gradient reductions), each one instruction
// compiled unfused, timed at 1 and at
// 2 OpenMP threads in alternation. Prints the minimum and median milliseconds per call over
// --reps runs and the 1-thread/2-thread ratio (how much of the second thread the kernel
// uses; on a loaded machine the minimum is the steadier figure).
//
//   build/bench/data_movement_bench [--reps 40] [--filter gather]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/backend/backend.h"
#include "kiln/ir/parser.h"

namespace {

using namespace kiln;

struct Case {
  std::string name, params, root;
  int64_t index_hi;  // indices drawn from [0, index_hi)
};

std::vector<Case> cases() {
  auto gather = [](const char* t) {
    return Case{fmt::format("gather {}[2048,512] (MoE dispatch)", t),
                fmt::format("  %x = {}[1024,512] parameter(), index=0\n  %i = s32[2048] parameter(), index=1\n", t),
                fmt::format("%r = {}[2048,512] gather(%x, %i), axis=0", t), 1024};
  };
  auto combine = [](const char* t) {
    return Case{fmt::format("scatter_add {}[1024,512] (MoE combine)", t),
                fmt::format("  %x = {0}[1024,512] parameter(), index=0\n  %i = s32[2048] parameter(), index=1\n"
                            "  %u = {0}[2048,512] parameter(), index=2\n", t),
                fmt::format("%r = {}[1024,512] scatter_add(%x, %i, %u), axis=0", t), 1024};
  };
  return {
      gather("bf16"),
      gather("f32"),
      combine("f32"),
      combine("bf16"),
      {"scatter_add bf16[8,512] (expert rows)",
       "  %x = bf16[8,512] parameter(), index=0\n  %i = s32[2048] parameter(), index=1\n"
       "  %u = bf16[2048,512] parameter(), index=2\n",
       "%r = bf16[8,512] scatter_add(%x, %i, %u), axis=0", 8},
      {"scatter_add f32[2,512,4096] (loss one-hot)",
       "  %x = f32[2,512,4096] parameter(), index=0\n  %i = s32[2,512,1] parameter(), index=1\n"
       "  %u = f32[2,512,1] parameter(), index=2\n",
       "%r = f32[2,512,4096] scatter_add(%x, %i, %u), axis=2, batch_dims=2", 4096},
      {"broadcast f32[] -> f32[2,512,4096]", "  %x = f32[] parameter(), index=0\n",
       "%r = f32[2,512,4096] broadcast(%x), dims={}", 1},
      {"broadcast f32[512] -> f32[4096,512]", "  %x = f32[512] parameter(), index=0\n",
       "%r = f32[4096,512] broadcast(%x), dims={1}", 1},
      {"transpose f32[512,8,64] -> [8,64,512]", "  %x = f32[512,8,64] parameter(), index=0\n",
       "%r = f32[8,64,512] transpose(%x), perm={1,2,0}", 1},
      {"transpose f32[8,64,512] -> [512,8,64]", "  %x = f32[8,64,512] parameter(), index=0\n",
       "%r = f32[512,8,64] transpose(%x), perm={2,0,1}", 1},
      {"transpose f32[4096,512] -> [512,4096]", "  %x = f32[4096,512] parameter(), index=0\n",
       "%r = f32[512,4096] transpose(%x), perm={1,0}", 1},
      // The MoE bench shape's logits weight gradient (vocabulary 32,000): larger than the L3.
      {"transpose f32[32000,512] -> [512,32000]", "  %x = f32[32000,512] parameter(), index=0\n",
       "%r = f32[512,32000] transpose(%x), perm={1,0}", 1},
      {"slice f32[2,512,8,64] -> [2,512,8,32]", "  %x = f32[2,512,8,64] parameter(), index=0\n",
       "%r = f32[2,512,8,32] slice(%x), start={0,0,0,32}, limit={2,512,8,64}", 1},
      {"concatenate 2 x f32[2,512,8,32]",
       "  %a = f32[2,512,8,32] parameter(), index=0\n  %b = f32[2,512,8,32] parameter(), index=1\n",
       "%r = f32[2,512,8,64] concatenate(%a, %b), dim=3", 1},
      {"pad f32[2,512,8,32] -> [2,512,8,64]",
       "  %x = f32[2,512,8,32] parameter(), index=0\n  %v = f32[] parameter(), index=1\n",
       "%r = f32[2,512,8,64] pad(%x, %v), low={0,0,0,32}, high={0,0,0,0}", 1},
      {"iota s32[2,512,2,8]", "", "%r = s32[2,512,2,8] iota(), dim=3", 1},
      {"reduce_sum bf16[2,512,2,64] -> [2,64]", "  %x = bf16[2,512,2,64] parameter(), index=0\n",
       "%r = bf16[2,64] reduce_sum(%x), dims={0,1}", 1},
      {"reduce_sum bf16[2,512,512] -> [512]", "  %x = bf16[2,512,512] parameter(), index=0\n",
       "%r = bf16[512] reduce_sum(%x), dims={0,1}", 1},
  };
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 40;
  std::string filter;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--filter") == 0) filter = argv[i + 1];
  }
  std::printf("%-42s %10s %10s %10s %10s %8s\n", "kernel (one instruction, unfused)", "1t min ms", "2t min ms", "1t med",
              "2t med", "1t/2t");
  for (const Case& c : cases()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    std::string text = fmt::format("module @m\nENTRY computation @main {{\n{}  ROOT {}\n}}\n", c.params, c.root);
    auto module = ir::parse_module(text);
    if (!module.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), module.status().to_string().c_str());
      return 1;
    }
    backend::CompileOptions options;
    options.fuse = false;
    auto exe = backend::compile_cpu(**module, options);
    if (!exe.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), exe.status().to_string().c_str());
      return 1;
    }
    std::mt19937_64 rng(5);
    std::vector<backend::Buffer> args;
    const ir::Computation& entry = *(*module)->entry();
    for (int i = 0; i < entry.num_params(); ++i) {
      backend::Buffer b(entry.param(i)->shape());
      for (int64_t e = 0; e < b.num_elements(); ++e) {
        b.set(e, ir::is_floating(b.shape().dtype()) ? std::uniform_real_distribution<double>(-2, 2)(rng)
                                                     : static_cast<double>(rng() % c.index_hi));
      }
      args.push_back(std::move(b));
    }
    std::vector<double> times[2];
    for (int r = 0; r < reps + 2; ++r) {
      for (int t = 0; t < 2; ++t) {
        omp_set_num_threads(t + 1);
        auto t0 = std::chrono::steady_clock::now();
        auto out = (*exe)->run(args);
        double ms = ms_since(t0);
        if (!out.ok()) {
          std::fprintf(stderr, "%s: %s\n", c.name.c_str(), out.status().to_string().c_str());
          return 1;
        }
        if (r >= 2) times[t].push_back(ms);  // the first two runs warm the planned buffers
      }
    }
    double mins[2], meds[2];
    for (int t = 0; t < 2; ++t) {
      std::sort(times[t].begin(), times[t].end());
      mins[t] = times[t].front();
      meds[t] = times[t][times[t].size() / 2];
    }
    std::printf("%-42s %10.3f %10.3f %10.3f %10.3f %8.2f\n", c.name.c_str(), mins[0], mins[1], meds[0], meds[1],
                mins[0] / mins[1]);
  }
  std::printf("reproduce: build/bench/data_movement_bench --reps %d\n", reps);
  return 0;
}
