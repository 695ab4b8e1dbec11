// The data pipeline alone (dataset_type=hf): dataset files -> documents -> tokens -> packed
// batches, in tokens per second of wall time, with 1 and 2 tokenizer threads, beside the
// tokenizer alone on the same documents (one thread). bench/data_vs_step.py puts these
// beside a training step's consumption and PyPI's tokenizers / tiktoken on the same text.
//
//   build/bench/data_pipeline_bench                       fortunes x 40 as one .jsonl, bytes tokenizer
//   build/bench/data_pipeline_bench --path DIR [--files GLOB] [--column text]
//       [--tokenizer_type tiktoken --tokenizer_path o200k_harmony] [--seq 2048] [--batch 8]
//       [--batches 200] [--threads 1,2]
//
// Prints one line per thread count and one for the tokenizer, and a JSON line ("json: {...}").
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/data/sources/document_reader.h"
#include "kiln/data/stream_pipeline.h"
#include "kiln/data/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The default dataset: the fortunes corpus (scripts/setup.sh), each paragraph a document,
// 40 times over, as one JSONL file in a fresh temporary folder.
std::string default_dataset() {
  const fs::path dir = fs::temp_directory_path() / ("kiln_data_bench_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream out(dir / "fortunes.jsonl");
  for (int copy = 0; copy < 40; ++copy) {
    for (const char* f : {"fortunes", "literature", "riddles"}) {
      std::ifstream in(std::string("/usr/share/games/fortunes/") + f, std::ios::binary);
      KILN_CHECK(in.good()) << "no /usr/share/games/fortunes/" << f << ": run scripts/setup.sh, or pass --path";
      std::string text, line;
      auto flush = [&] {
        if (!text.empty()) out << nlohmann::json({{"text", text}}).dump() << "\n";
        text.clear();
      };
      while (std::getline(in, line)) {
        if (line == "%") {
          flush();
        } else {
          text += line + "\n";
        }
      }
      flush();
    }
  }
  return dir.string();
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, files, column = "text", type = "bytes", model, threads_list = "1,2";
  int64_t seq = 2048, batch = 8, batches = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--path") path = v;
    else if (k == "--files") files = v;
    else if (k == "--column") column = v;
    else if (k == "--tokenizer_type") type = v;
    else if (k == "--tokenizer_path") model = v;
    else if (k == "--seq") seq = std::atoll(v.c_str());
    else if (k == "--batch") batch = std::atoll(v.c_str());
    else if (k == "--batches") batches = std::atoll(v.c_str());
    else if (k == "--threads") threads_list = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const bool made = path.empty();
  if (made) path = default_dataset();
  auto listed = kiln::data::list_dataset_files(path, "", files);
  KILN_CHECK(listed.ok()) << listed.status().to_string();
  auto made_tokenizer = kiln::data::make_tokenizer(type, model);
  KILN_CHECK(made_tokenizer.ok()) << made_tokenizer.status().to_string();
  std::shared_ptr<const kiln::data::Tokenizer> tokenizer(std::move(*made_tokenizer));
  std::printf("data pipeline: %zu file(s) under %s, column %s, tokenizer %s; batches of %lld x %lld tokens\n",
              listed->size(), path.c_str(), column.c_str(), tokenizer->name().c_str(), static_cast<long long>(batch),
              static_cast<long long>(seq));

  nlohmann::json report = {{"files", listed->size()}, {"tokenizer", tokenizer->name()}, {"seq", seq}, {"batch", batch}};
  std::stringstream list(threads_list);
  for (std::string item; std::getline(list, item, ',');) {
    kiln::data::StreamOptions o;
    o.global_batch = batch;
    o.seq_len = seq;
    o.threads = std::atoi(item.c_str());
    o.add_bos = tokenizer->bos_id() >= 0;
    o.add_eos = tokenizer->eos_id() >= 0;
    kiln::data::ReaderFactory open = [column](const std::string& p) {
      return kiln::data::open_document_reader(p, column);
    };
    auto p = kiln::data::StreamPipeline::create(*listed, open, tokenizer, o);
    KILN_CHECK(p.ok()) << p.status().to_string();
    const auto t0 = Clock::now();
    int64_t tokens = 0;
    for (int64_t k = 0; k < batches; ++k) {
      auto b = (*p)->try_rows(k, 0, batch);
      KILN_CHECK(b.ok()) << b.status().to_string();
      for (int32_t s : b->segmentation) tokens += s != 0;
    }
    const double s = seconds_since(t0);
    std::printf("pipeline, %d tokenizer thread(s): %lld batches, %lld tokens in %.3f s = %.0f tokens/s\n", o.threads,
                static_cast<long long>(batches), static_cast<long long>(tokens), s, tokens / s);
    report["pipeline_tokens_per_s"][item] = tokens / s;
  }

  // The tokenizer alone, one thread, on the documents of the first file.
  auto reader = kiln::data::open_document_reader(listed->front(), column);
  KILN_CHECK(reader.ok()) << reader.status().to_string();
  std::vector<std::string> docs;
  int64_t bytes = 0;
  for (std::string text;;) {
    auto more = (*reader)->next(&text);
    KILN_CHECK(more.ok()) << more.status().to_string();
    if (!*more || bytes > (64 << 20)) break;
    bytes += static_cast<int64_t>(text.size());
    docs.push_back(std::move(text));
  }
  const auto t0 = Clock::now();
  int64_t tokens = 0;
  for (const std::string& d : docs) tokens += static_cast<int64_t>(tokenizer->encode(d).size());
  const double s = seconds_since(t0);
  std::printf("tokenizer alone, 1 thread: %.1f MB of text, %lld tokens in %.3f s = %.0f tokens/s, %.1f MB/s\n",
              bytes / 1e6, static_cast<long long>(tokens), s, tokens / s, bytes / 1e6 / s);
  report["tokenizer_tokens_per_s"] = tokens / s;
  report["tokenizer_mb_per_s"] = bytes / 1e6 / s;
  std::printf("json: %s\n", report.dump().c_str());
  if (made) fs::remove_all(path);
  return 0;
}
