#include "kiln/train/data_source.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "kiln/data/batch_split.h"
#include "kiln/data/corpus.h"
#include "kiln/data/text_dataset.h"
#include "kiln/data/tokenizer.h"

namespace kiln::train {

namespace {

// The shards at `path`, packed into batches of `rows` rows of max_target_length tokens
// (docs/data.md): the global batch of a step (every micro-batch of it) for training, one
// micro-batch for eval. Errors carry "dataset_path=...".
Result<std::unique_ptr<data::TokenPipeline>> open_pipeline(const config::Config& config, const std::string& path,
                                                           data::Split split, int64_t rows) {
  const std::string context = "dataset_path=" + config.get_string("dataset_path");
  Result<std::vector<std::unique_ptr<data::Shard>>> shards = data::open_shards(path);
  if (!shards.ok()) return shards.status().with_context(context);
  data::PipelineOptions o;
  o.global_batch = rows;
  o.seq_len = config.get_int("max_target_length");
  o.model_vocab = config.get_int("vocab_size");
  o.add_bos = config.get_bool("add_bos");
  o.add_eos = config.get_bool("add_eos");
  o.packing = config.get_bool("packing");
  o.seed = static_cast<uint64_t>(config.get_int("data_shuffle_seed"));
  o.split = split;
  Result<std::unique_ptr<data::TokenPipeline>> p = data::TokenPipeline::create(std::move(*shards), o);
  if (!p.ok()) return p.status().with_context(context);
  return p;
}

// dataset_type=text: the shard directory of the tokenized (cached) text.
Result<std::string> tokenize_text(const config::Config& config, std::vector<std::string>& report) {
  const std::string& path = config.get_string("dataset_path");
  KILN_ASSIGN_OR_RETURN(data::TextFiles files, data::list_text_files(path));
  const std::string& type = config.get_string("tokenizer_type");
  const std::string& model = config.get_string("tokenizer_path");
  Result<std::unique_ptr<data::Tokenizer>> tokenizer = data::make_tokenizer(type, model, config.get_string("tokenizer_dir"));
  if (!tokenizer.ok()) return tokenizer.status().with_context("dataset_type=text");
  std::string cache = config.get_string("dataset_cache_dir");
  if (cache.empty()) cache = (std::filesystem::path(config.get_string("base_output_directory")) / "token_cache").string();
  std::string key = type + ":" + model;
  std::error_code ec;
  if (!model.empty() && std::filesystem::exists(model, ec)) {
    key += ":" + std::to_string(std::filesystem::file_size(model, ec));
    key += ":" + std::to_string(std::filesystem::last_write_time(model, ec).time_since_epoch().count());
  }
  Result<data::CachedCorpus> corpus = data::tokenize_cached(files.files, **tokenizer, key, cache);
  if (!corpus.ok()) return corpus.status().with_context("dataset_path=" + path);
  report.push_back(fmt::format("data: {} text files from {} ({} skipped: links or binary) -> {} documents, {} tokens "
                               "with tokenizer_type={} ({} {})",
                               files.files.size(), path, files.skipped, corpus->documents, corpus->tokens, type,
                               corpus->reused ? "cached in" : "tokenized now into", corpus->dir));
  return corpus->dir;
}

}  // namespace

Result<DataSources> open_data_sources(const config::Config& config) {
  DataSources out;
  if (config.get_int("prefetch_depth") < 0) {
    return invalid_argument("prefetch_depth={}: expected a batch count >= 0 (0 = no background thread)",
                            config.get_int("prefetch_depth"));
  }
  const std::string& type = config.get_string("dataset_type");
  if (type == "synthetic") return out;
  std::string shards = config.get_string("dataset_path");
  if (type == "text") {
    KILN_ASSIGN_OR_RETURN(shards, tokenize_text(config, out.report));
  }
  const config::Derived& d = config.derived();
  const bool eval = config.get_int("eval_interval") > 0;
  KILN_ASSIGN_OR_RETURN(out.train, open_pipeline(config, shards, eval ? data::Split::kTrain : data::Split::kAll,
                                                 d.global_batch_size));
  data::BatchSplit split = data::make_batch_split(d.mesh, d.logical_axis_rules);
  KILN_RETURN_IF_ERROR(split.check_batch(d.micro_batch_size));
  out.report.push_back(fmt::format("data: token shards from {}: {} sequences of {} tokens per epoch (packing={}, "
                                   "data_shuffle_seed={}); global batch {} ({} micro-batch(es)) split over {} data shard(s) [{}]",
                                   shards, out.train->samples_per_epoch(), config.get_int("max_target_length"),
                                   config.get_bool("packing"), config.get_int("data_shuffle_seed"),
                                   d.global_batch_size, config.get_int("gradient_accumulation_steps"),
                                   split.num_shards, fmt::join(split.axes, ", ")));
  if (eval) {
    KILN_ASSIGN_OR_RETURN(out.eval, open_pipeline(config, shards, data::Split::kEval, d.micro_batch_size));
    out.eval_interval = config.get_int("eval_interval");
    const int64_t whole = std::max<int64_t>(1, out.eval->samples_per_epoch() / d.micro_batch_size);
    out.eval_batches = config.get_int("eval_steps") > 0 ? config.get_int("eval_steps") : whole;
    out.report.push_back(fmt::format("eval: every {} steps, {} batches of the held-out split (every {}th document: "
                                     "{} sequences), forward only",
                                     out.eval_interval, out.eval_batches, data::kEvalStride,
                                     out.eval->samples_per_epoch()));
  }
  return out;
}

HostBatch to_host_batch(const data::Batch& b) {
  ir::Shape shape(ir::DType::kS32, {b.batch, b.seq_len});
  auto literal = [&](const std::vector<int32_t>& v) { return ir::Literal(shape, std::vector<double>(v.begin(), v.end())); };
  return {literal(b.inputs), literal(b.targets), literal(b.positions), literal(b.segmentation)};
}

}  // namespace kiln::train
