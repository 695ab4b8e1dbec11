// Tokenizer throughput on English text, one thread (the per-core rate that `kiln tokenize`
// multiplies by its threads): tiktoken encodings (split + BPE, and the split alone),
// decoding, and the bytes tokenizer as the floor. The text is the fortunes corpus that
// scripts/setup.sh installs (quotations and literature, ~100 KB, read once).
//
//   build/bench/tokenizer_bench                                  (all; MB/s in bytes_per_second)
//   build/bench/tokenizer_bench --benchmark_filter=encode/o200k_harmony
#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "kiln/base/check.h"
#include "kiln/data/tokenizer.h"
#include "kiln/data/tokenizer/tiktoken.h"

namespace kiln::data {
namespace {

const std::string& english_text() {
  static const std::string text = [] {
    std::string all;
    for (const char* f : {"fortunes", "literature", "riddles"}) {
      std::ifstream in(std::string("/usr/share/games/fortunes/") + f, std::ios::binary);
      std::ostringstream ss;
      ss << in.rdbuf();
      all += ss.str();
    }
    KILN_CHECK(!all.empty()) << "no English text under /usr/share/games/fortunes: run scripts/setup.sh";
    return all;
  }();
  return text;
}

const TiktokenTokenizer& tiktoken(const std::string& name) {
  static std::map<std::string, std::unique_ptr<TiktokenTokenizer>> cache;
  auto& t = cache[name];
  if (!t) {
    auto loaded = TiktokenTokenizer::load(name);
    KILN_CHECK(loaded.ok()) << loaded.status().message();
    t = std::move(loaded).value();
  }
  return *t;
}

void encode(benchmark::State& state, const std::string& name) {
  const TiktokenTokenizer& t = tiktoken(name);
  const std::string& text = english_text();
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = t.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["bytes_per_token"] = static_cast<double>(text.size()) / static_cast<double>(tokens);
}

void split_only(benchmark::State& state, const std::string& name) {
  auto pre = Pretokenizer::compile(tiktoken(name).pattern());
  KILN_CHECK(pre.ok());
  const std::string& text = english_text();
  for (auto _ : state) {
    size_t pieces = 0;
    (*pre)->split(text, [&](std::string_view) { ++pieces; });
    benchmark::DoNotOptimize(pieces);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.SetLabel((*pre)->jit() ? "PCRE2 JIT" : "PCRE2 interpreter");
}

void decode(benchmark::State& state, const std::string& name) {
  const TiktokenTokenizer& t = tiktoken(name);
  std::vector<int32_t> ids = t.encode(english_text());
  for (auto _ : state) {
    auto text = t.decode(ids);
    benchmark::DoNotOptimize(text->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * english_text().size()));
}

void encode_bytes(benchmark::State& state) {
  ByteTokenizer t;
  for (auto _ : state) benchmark::DoNotOptimize(t.encode(english_text()).data());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * english_text().size()));
}

void register_all() {
  for (const char* name : {"o200k_harmony", "cl100k_base", "gpt2"}) {
    benchmark::RegisterBenchmark((std::string("encode/") + name).c_str(), encode, std::string(name))
        ->Unit(benchmark::kMillisecond);
  }
  for (const char* name : {"o200k_harmony", "gpt2"}) {
    benchmark::RegisterBenchmark((std::string("split_only/") + name).c_str(), split_only, std::string(name))
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("decode/o200k_harmony", decode, std::string("o200k_harmony"))
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("encode/bytes", encode_bytes)->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace kiln::data

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  kiln::data::register_all();
  std::printf("tokenizer_bench: %zu bytes of English text (fortunes), one thread; target >= 5 MB/s encoding\n",
              kiln::data::english_text().size());
  benchmark::RunSpecifiedBenchmarks();
  std::printf("reproduce: build/bench/tokenizer_bench\n");
  return 0;
}
