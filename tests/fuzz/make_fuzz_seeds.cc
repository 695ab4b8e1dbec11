// make_fuzz_seeds SOURCE_DIR: writes the seed corpora tests/fuzz/corpus/<target>/seed-* from
// Kiln's own writers (checkpoint::save, the safetensors and shard writers, the tokenizer
// trainer, the Hugging Face exporter) and the project's own test files (the IR modules of
// the op tests). Run again when a format changes; the output is committed (docs/fuzzing.md).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/data/corpus.h"
#include "kiln/data/shard.h"
#include "kiln/data/tokenizer.h"
#include "kiln/train/observability/metrics.h"
#include "kiln/train/observability/run_events.h"
#include "tests/fuzz/fuzz_files.h"
#include "tests/fuzz/fuzz_fixtures.h"
#include "tests/testing/hf_fixture.h"

namespace {

namespace fs = std::filesystem;
using kiln::fuzz::join_files;
using kiln::fuzz::read_file;

fs::path g_corpus;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_corpus / target;
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + name), std::ios::binary) << bytes;
}

std::string scratch(const std::string& name) { return kiln::fuzz::fresh_dir("seeds/" + name); }

const char* kText =
    "The kiln fires the clay.\nIt takes a day to cool.\n%\nA second document, with punctuation: "
    "commas, colons; and numbers 1234.\n\nA third one after a blank line. Unicode: \xc3\xa9t\xc3\xa9 "
    "\xe2\x82\xac 5.\n";

void checkpoints() {
  using namespace kiln::checkpoint;
  const std::string fsdp2 = kiln::fuzz::small_checkpoint_dir();
  seed("checkpoint_dir", "fsdp2", join_files(kiln::fuzz::step_dir_files(fsdp2)));
  seed("checkpoint_manifest", "fsdp2", read_file(fsdp2 + "/manifest.json"));
  seed("safetensors", "checkpoint-shard", read_file(fsdp2 + "/shard-0.safetensors"));

  CheckpointState one;
  one.step = 7;
  one.config_yaml = "model_name: gpt-oss-tiny\n";
  one.tensors.push_back(StateTensor::global("params/emb", kiln::ir::Literal(kiln::ir::Shape(kiln::ir::DType::kF32, {3, 2}),
                                                                             {1, -2, 3.5, 0, 1e-3, 7})));
  one.tensors.push_back(StateTensor::global("nu/emb", kiln::ir::Literal(kiln::ir::Shape(kiln::ir::DType::kBF16, {3, 2}),
                                                                         {0.5, 0.25, 0, 1, 2, 3})));
  SaveOptions options;
  options.progress = false;
  const std::string root = scratch("one_device");
  KILN_CHECK(save(root, one, options).ok());
  seed("checkpoint_dir", "one-device", join_files(kiln::fuzz::step_dir_files(step_dir(root, 7))));

  // Every dtype the reader maps, with metadata.
  const std::string f32(24, '\x3f'), bf16(8, '\x40'), i64(16, '\x01'), u8(5, '\x07');
  const std::string path = scratch("dtypes") + "/m.safetensors";
  KILN_CHECK(write_safetensors_raw(path, {{"a", "F32", {2, 3}, &f32}, {"b", "BF16", {4}, &bf16},
                                          {"c", "I64", {2}, &i64}, {"d", "U8", {5}, &u8}},
                                   {{"format", "pt"}})
                 .ok());
  seed("safetensors", "dtypes", read_file(path));

  // MXFP4: w_blocks [E=2, R=4, G=1, 16] and w_scales [2, 4, 1] beside a plain tensor.
  std::string blocks(2 * 4 * 16, '\0'), scales(2 * 4, '\x7f');
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<char>(i * 37);
  const std::string bias(8, '\x3c');
  const std::string mx = scratch("mxfp4") + "/e.safetensors";
  KILN_CHECK(write_safetensors_raw(mx, {{"w_blocks", "U8", {2, 4, 1, 16}, &blocks}, {"w_scales", "U8", {2, 4, 1}, &scales},
                                        {"bias", "BF16", {4}, &bias}})
                 .ok());
  seed("mxfp4", "pair", read_file(mx));
}

void hugging_face() {
  const std::string dir = scratch("hf");
  kiln::testing::write_hf_fixture(dir);
  seed("hf_dir", "gpt-oss-two-files",
       join_files({{"config.json", read_file(dir + "/config.json")},
                   {"model.safetensors.index.json", read_file(dir + "/model.safetensors.index.json")},
                   {"model-00001-of-00002.safetensors", read_file(dir + "/model-00001-of-00002.safetensors")},
                   {"model-00002-of-00002.safetensors", read_file(dir + "/model-00002-of-00002.safetensors")}}));
}

// A run's history as the trainer writes it: step records (with goodput, expert loads, a
// skipped step), and events of two attempts (start, compile, checkpoint, goodput, restart,
// spike, preemption, finish).
void run_histories() {
  const std::string dir = scratch("history");
  const std::string metrics = dir + "/metrics.jsonl", events = dir + "/events.jsonl";
  {
    kiln::train::JsonlWriter w;
    KILN_CHECK(w.open_continuing(metrics, 1, 0).ok());
    for (int64_t s = 0; s < 6; ++s) {
      kiln::train::StepRecord r;
      r.step = s;
      r.loss = 5.0 - 0.5 * static_cast<double>(s);
      r.lm_loss = r.loss;
      r.total_weights = 64;
      r.step_time_s = 0.1;
      r.mfu = 0.25;
      r.goodput = 0.5 + 0.05 * static_cast<double>(s);
      r.skipped = s == 4;
      if (s % 2 == 0) r.expert_load = {12, 8, 0, 10, 8, 1};
      KILN_CHECK(w.write(r).ok());
    }
    KILN_CHECK(w.flush().ok());
  }
  {
    kiln::train::RunEvents ev;
    KILN_CHECK(ev.open(events).ok());
    KILN_CHECK(ev.write("start", 0, {{"attempt", 1}, {"num_devices", 1}}).ok());
    KILN_CHECK(ev.write("compile", 0, {{"trace_s", 0.1}, {"compile_s", 0.5}, {"init_s", 0.1}}).ok());
    KILN_CHECK(ev.write("checkpoint_save", 2, {{"path", "checkpoints/2"}, {"blocked_s", 0.01}, {"background", false}}).ok());
    KILN_CHECK(ev.write("goodput", 2, {{"final", false}, {"wall_s", 1.0}, {"startup_s", 0.7}, {"productive_s", 0.2},
                                       {"data_wait_s", 0.0}, {"checkpoint_s", 0.01}, {"eval_s", 0.0}, {"other_s", 0.09},
                                       {"redone_s", 0.0}, {"goodput", 0.2}})
                    .ok());
    KILN_CHECK(ev.write("start", 2, {{"attempt", 2}, {"num_devices", 1}}).ok());
    KILN_CHECK(ev.write("restart", 2, {{"supervisor_attempt", 2}, {"previous", "signal 9"}}).ok());
    KILN_CHECK(ev.write("spike_skipped", 4, {{"loss", 9.0}, {"loss_limit", 4.0}}).ok());
    KILN_CHECK(ev.write("preempted", 6, {{"signal", "SIGTERM"}, {"checkpoint_step", 6}}).ok());
    KILN_CHECK(ev.write("finish", 6, {}).ok());
  }
  const std::string m = read_file(metrics), e = read_file(events);
  seed("run_history", "two-attempts", join_files({{"metrics.jsonl", m}, {"events.jsonl", e}}));
  seed("run_history", "torn", join_files({{"metrics.jsonl", m + "{\"step\": 6, \"lo"}, {"events.jsonl", e + "{\"ev"}}));
  seed("report_run_dir", "two-attempts",
       join_files({{"metrics.jsonl", m}, {"events.jsonl", e},
                   {"attribution.txt", "step 0.100 s\nGEMMs 0.050 s 50.0%\nfused elementwise 0.030 s 30.0%\n"}}));
}

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += {k[v >> 18], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

void tokenizers() {
  // tiktoken: a JSON encoder of one's own (256 bytes, then merges) and a rank file.
  std::string ranks, lines;
  for (int b = 0; b < 256; ++b) ranks += base64(std::string(1, static_cast<char>(b))) + " ";
  int rank = 256;
  for (const char* merge : {"th", "he", "the", " t", "in", "er", "ki", "kil", "kiln", "  "}) {
    ranks += base64(merge) + " ";
    lines += base64(merge) + " " + std::to_string(rank++) + "\n";
  }
  const nlohmann::json encoder = {{"pat_str", R"('s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"},
                                  {"bpe_ranks", ranks + "! 300 " + base64("clay")},
                                  {"special_tokens", {{"<|endoftext|>", 301}}}};
  seed("tiktoken", "json-encoder", "\x01" + encoder.dump());
  std::string file;
  for (int b = 0; b < 256; ++b) file += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  seed("tiktoken", "rank-file", std::string(1, '\0') + file + lines);

  // SentencePiece: a small unigram model trained by Kiln's trainer.
  if (kiln::data::sentencepiece_available()) {
    const std::string dir = scratch("sentencepiece");
    std::string text;
    for (int i = 0; i < 40; ++i) text += std::string(kText) + "\n\n";
    std::ofstream(dir + "/train.txt") << text;
    const kiln::Status trained = kiln::data::train_sentencepiece({dir + "/train.txt"}, dir + "/m", 60);
    KILN_CHECK(trained.ok()) << trained.to_string();
    seed("sentencepiece", "unigram", read_file(dir + "/m.model"));
  }
}

void token_data() {
  using namespace kiln::data;
  const std::string dir = scratch("shards");
  ShardWriter small({.vocab_size = 300, .bos_id = 1, .eos_id = 2});
  KILN_CHECK(small.add_document(std::vector<int32_t>{1, 5, 299, 7, 2}).ok());
  KILN_CHECK(small.add_document(std::vector<int32_t>{1, 2}).ok());
  KILN_CHECK(small.write(dir + "/u16.bin").ok());
  seed("token_shard", "u16", read_file(dir + "/u16.bin"));
  ShardWriter big({.vocab_size = 100000, .bos_id = 99999, .eos_id = kNoToken});
  KILN_CHECK(big.add_document(std::vector<int32_t>{99999, 65536, 3, 70000}).ok());
  KILN_CHECK(big.write(dir + "/u32.bin").ok());
  seed("token_shard", "u32", read_file(dir + "/u32.bin"));

  std::ofstream(dir + "/docs.txt") << kText;
  auto bytes = make_tokenizer("bytes", "");
  KILN_CHECK(bytes.ok());
  const std::string out = dir + "/tokenized";
  auto report = tokenize_files({dir + "/docs.txt"}, **bytes, {.output_dir = out, .shard_tokens = 64});
  KILN_CHECK(report.ok()) << report.status().to_string();
  std::vector<std::pair<std::string, std::string>> files = {{"manifest.json", read_file(out + "/manifest.json")}};
  for (int64_t s = 0; s < report->shards; ++s) {
    char name[32];
    std::snprintf(name, sizeof(name), "shard_%05lld.bin", static_cast<long long>(s));
    files.emplace_back(name, read_file(out + "/" + name));
  }
  seed("token_manifest", "bytes-tokenizer", join_files(files));

  seed("corpus", "fortunes", std::string(1, '\0') + kText);
  seed("corpus", "jsonl", "\x01{\"text\": \"one document\"}\n{\"text\": \"two \\u00e9\", \"id\": 2}\n\n{\"meta\": 1}\n");
}

void configs() {
  seed("config_yaml", "mesh-and-schedule",
       "# a run of gpt-oss-tiny on four devices\nmodel_name: gpt-oss-tiny\nsteps: 20\nper_device_batch_size: 2\n"
       "ici_fsdp_parallelism: 2\nici_expert_parallelism: 2\nlocal_devices: 4\nlearning_rate: 3.0e-4\n"
       "logical_axis_rules: [['embed', 'fsdp'], ['exp', 'expert']]\ndataset_type: synthetic\n");
  seed("config_overrides", "tiny", "model_name=gpt-oss-tiny\nsteps=3\nper_device_batch_size=2\nmax_target_length=64\n");
  seed("config_overrides", "mesh",
       "model_name=gpt-oss-tiny\nici_fsdp_parallelism=2\nici_expert_parallelism=2\nlocal_devices=4\n"
       "gradient_accumulation_steps=2\nremat_policy=full\nweight_dtype=bfloat16\n");
  seed("config_overrides", "model-keys",
       "model_name=gpt-oss-tiny\noverride_model_config=true\nbase_emb_dim=64\nnum_experts=4\n"
       "learning_rate_schedule_steps=-1\nlogical_axis_rules=[['embed', 'fsdp']]\n");
}

// The IR modules of the op and pass tests: every raw string literal that starts a module.
void ir_modules(const fs::path& source) {
  const std::regex module_text(R"~~(R"\((module @[\s\S]*?)\)")~~");
  std::set<std::string> seen;
  int n = 0;
  for (const auto& entry : fs::recursive_directory_iterator(source / "tests")) {
    if (entry.path().extension() != ".cc") continue;
    const std::string text = read_file(entry.path().string());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), module_text); it != std::sregex_iterator(); ++it) {
      const std::string module = (*it)[1].str();
      if (module.size() > 4096 || module.find('{') == std::string::npos || !seen.insert(module).second) continue;
      seed("ir_text", entry.path().stem().string() + "-" + std::to_string(n++), module);
    }
  }
}

std::string npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

void npy_files() {
  seed("npy", "i4-2d", npy("<i4", "(2, 3)", std::string("\x01\0\0\0\x02\0\0\0\x03\0\0\0\x04\0\0\0\x05\0\0\0\x06\0\0\0", 24)));
  seed("npy", "i8-1d", npy("<i8", "(2,)", std::string("\x07\0\0\0\0\0\0\0\x09\0\0\0\0\0\0\0", 16)));
  seed("npy", "u2-1d", npy("<u2", "(3,)", std::string("\x01\0\x02\0\xff\xff", 6)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds SOURCE_DIR\n");
    return 2;
  }
  const fs::path source = argv[1];
  g_corpus = source / "tests" / "fuzz" / "corpus";
  checkpoints();
  hugging_face();
  tokenizers();
  token_data();
  configs();
  ir_modules(source);
  npy_files();
  run_histories();
  std::printf("seeds written under %s\n", g_corpus.string().c_str());
  return 0;
}
