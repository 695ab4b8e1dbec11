#include "kiln/train/data_source.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "kiln/data/batch_split.h"
#include "kiln/data/corpus.h"
#include "kiln/data/sources/document_reader.h"
#include "kiln/data/stream_pipeline.h"
#include "kiln/data/text_dataset.h"
#include "kiln/data/tokenizer.h"

namespace kiln::train {

namespace {

// The packing keys both pipelines read (PipelineOptions, StreamOptions): `rows` rows of
// max_target_length per batch.
template <typename Options>
Options packing_options(const config::Config& config, int64_t rows, data::Split split) {
  Options o;
  o.global_batch = rows;
  o.seq_len = config.get_int("max_target_length");
  o.model_vocab = config.get_int("vocab_size");
  o.add_bos = config.get_bool("add_bos");
  o.add_eos = config.get_bool("add_eos");
  o.packing = config.get_bool("packing");
  o.seed = static_cast<uint64_t>(config.get_int("data_shuffle_seed"));
  o.split = split;
  return o;
}

// The shards at `path`, packed into batches of `rows` rows of max_target_length tokens
// (docs/data.md): the global batch of a step (every micro-batch of it) for training, one
// micro-batch for eval. Errors carry "dataset_path=...".
Result<std::unique_ptr<data::BatchSource>> open_pipeline(const config::Config& config, const std::string& path,
                                                           data::Split split, int64_t rows) {
  const std::string context = "dataset_path=" + config.get_string("dataset_path");
  Result<std::vector<std::unique_ptr<data::Shard>>> shards = data::open_shards(path);
  if (!shards.ok()) return shards.status().with_context(context);
  const data::PipelineOptions o = packing_options<data::PipelineOptions>(config, rows, split);
  Result<std::unique_ptr<data::TokenPipeline>> p = data::TokenPipeline::create(std::move(*shards), o);
  if (!p.ok()) return p.status().with_context(context);
  return std::unique_ptr<data::BatchSource>(std::move(*p));
}

// The one column of train_data_columns / eval_data_columns: "text", or MaxText's list form
// "['text']" with one entry.
Result<std::string> data_column(const config::Config& config, const std::string& key) {
  std::string v = config.get_string(key);
  if (!v.empty() && v.front() == '[' && v.back() == ']') v = v.substr(1, v.size() - 2);
  std::string column;
  for (char ch : v) {
    if (ch != '\'' && ch != '"' && ch != ' ') column += ch;
  }
  if (column.empty() || column.find(',') != std::string::npos) {
    return invalid_argument("{}={}: expected one column name (the text column of the files), e.g. text", key,
                            config.get_string(key));
  }
  return column;
}

// The sources of data_mixture="DIR[:GLOB],WEIGHT;...": each named by its folder's name
// (made unique with a suffix), its files selected by the glob under DIR as hf_train_files
// selects them under hf_path.
Result<std::vector<data::StreamSource>> mixture_sources(const config::Config& config, const std::string& column) {
  const std::string& text = config.get_string("data_mixture");
  std::vector<data::StreamSource> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(';', begin);
    if (end == std::string::npos) end = text.size();
    std::string entry = text.substr(begin, end - begin);
    begin = end + 1;
    entry.erase(0, entry.find_first_not_of(' '));
    entry.erase(entry.find_last_not_of(' ') + 1);
    if (entry.empty()) continue;
    const size_t comma = entry.rfind(',');
    double weight = 0;
    bool ok = comma != std::string::npos && comma > 0;
    if (ok) {
      try {
        size_t used = 0;
        weight = std::stod(entry.substr(comma + 1), &used);
        ok = used == entry.size() - comma - 1 && weight > 0;
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) {
      return invalid_argument("data_mixture entry '{}': expected DIR[:GLOB],WEIGHT with a weight > 0, entries "
                              "separated by ';' (e.g. /data/fineweb,0.7;/data/stack:*.jsonl.zst,0.3)",
                              entry);
    }
    std::string dir = entry.substr(0, comma), glob;
    if (const size_t colon = dir.find(':'); colon != std::string::npos) {
      glob = dir.substr(colon + 1);
      dir = dir.substr(0, colon);
    }
    Result<std::vector<std::string>> files = data::list_dataset_files(dir, "", glob);
    if (!files.ok()) return files.status().with_context("data_mixture");
    std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
    if (name.empty()) name = "source";
    std::string unique = name;
    for (int n = 2;; ++n) {
      bool taken = false;
      for (const auto& s : out) taken = taken || s.name == unique;
      if (!taken) break;
      unique = fmt::format("{}_{}", name, n);
    }
    data::StreamSource s;
    s.name = unique;
    s.files = std::move(*files);
    s.weight = weight;
    s.open = [column](const std::string& path) { return data::open_document_reader(path, column); };
    out.push_back(std::move(s));
  }
  if (out.empty()) return invalid_argument("data_mixture='{}' names no source", text);
  return out;
}

// dataset_type=hf: a stream over the files `files_key` selects under hf_path/hf_data_dir, or
// over data_mixture's sources (training only).
Result<std::unique_ptr<data::BatchSource>> open_stream(const config::Config& config,
                                                       std::shared_ptr<const data::Tokenizer> tokenizer,
                                                       const std::string& files_key, const std::string& column_key,
                                                       data::Split split, int64_t rows, bool shuffle, bool mixture,
                                                       std::vector<std::string>& report) {
  const std::string context = mixture ? "dataset_type=hf" : fmt::format("dataset_type=hf hf_path={}", config.get_string("hf_path"));
  KILN_ASSIGN_OR_RETURN(const std::string column, data_column(config, column_key));
  std::vector<data::StreamSource> sources;
  if (mixture) {
    KILN_ASSIGN_OR_RETURN(sources, mixture_sources(config, column));
  } else {
    Result<std::vector<std::string>> files =
        data::list_dataset_files(config.get_string("hf_path"), config.get_string("hf_data_dir"),
                                 config.get_string(files_key));
    if (!files.ok()) return files.status().with_context(context);
    sources.resize(1);
    sources[0].name = "data";
    sources[0].files = std::move(*files);
    sources[0].open = [column](const std::string& path) { return data::open_document_reader(path, column); };
  }
  data::StreamOptions o = packing_options<data::StreamOptions>(config, rows, split);
  o.shuffle_files = shuffle;
  o.threads = static_cast<int>(config.get_int("data_threads"));
  if (o.threads < 1) return invalid_argument("data_threads={}: expected >= 1", config.get_int("data_threads"));
  std::vector<std::string> described;
  double total = 0;
  for (const auto& s : sources) total += s.weight;
  for (const auto& s : sources) {
    described.push_back(fmt::format("{}{} file(s) ({}{})",
                                    sources.size() > 1 ? fmt::format("{} {:.1f}%: ", s.name, 100.0 * s.weight / total) : "",
                                    s.files.size(), s.files.front(), s.files.size() > 1 ? ", ..." : ""));
  }
  Result<std::unique_ptr<data::StreamPipeline>> p = data::StreamPipeline::create(std::move(sources), std::move(tokenizer), o);
  if (!p.ok()) return p.status().with_context(context);
  report.push_back(fmt::format("data: streaming {} {}; column {}, {} tokenizer thread(s); {}",
                               split == data::Split::kEval ? "eval" : "training", fmt::join(described, "; "), column,
                               o.threads,
                               split == data::Split::kAll   ? "every document"
                               : split == data::Split::kTrain ? "every 20th document held out for eval"
                                                              : "every 20th document"));
  return std::unique_ptr<data::BatchSource>(std::move(*p));
}

// dataset_type=hf: the training stream and, with eval_interval > 0, the eval stream.
Status open_hf(const config::Config& config, DataSources& out) {
  const std::string& type = config.get_string("tokenizer_type");
  Result<std::unique_ptr<data::Tokenizer>> made =
      data::make_tokenizer(type, config.get_string("tokenizer_path"), config.get_string("tokenizer_dir"));
  if (!made.ok()) return made.status().with_context("dataset_type=hf");
  std::shared_ptr<const data::Tokenizer> tokenizer(std::move(*made));
  const config::Derived& d = config.derived();
  const bool eval = config.get_int("eval_interval") > 0;
  const bool eval_files = !config.get_string("hf_eval_files").empty();
  const bool shuffle = config.get_bool("enable_data_shuffling");
  const bool mixture = !config.get_string("data_mixture").empty();
  if (mixture && eval && !eval_files) {
    return invalid_argument("data_mixture with eval_interval={} needs hf_eval_files: the eval stream of a mixture "
                            "is named, not held out of its sources",
                            config.get_int("eval_interval"));
  }
  KILN_ASSIGN_OR_RETURN(out.train, open_stream(config, tokenizer, "hf_train_files", "train_data_columns",
                                               eval && !eval_files ? data::Split::kTrain : data::Split::kAll,
                                               d.global_batch_size, shuffle, mixture, out.report));
  if (eval) {
    KILN_ASSIGN_OR_RETURN(out.eval, open_stream(config, tokenizer, eval_files ? "hf_eval_files" : "hf_train_files",
                                                eval_files ? "eval_data_columns" : "train_data_columns",
                                                eval_files ? data::Split::kAll : data::Split::kEval,
                                                d.micro_batch_size, /*shuffle=*/false, /*mixture=*/false,
                                                out.report));
    out.eval_interval = config.get_int("eval_interval");
    if (config.get_int("eval_steps") <= 0) {
      return invalid_argument("dataset_type=hf with eval_interval={} needs eval_steps > 0: a stream has no known end "
                              "to evaluate up to",
                              config.get_int("eval_interval"));
    }
    out.eval_batches = config.get_int("eval_steps");
    out.report.push_back(fmt::format("eval: every {} steps, the first {} batches of the eval stream, forward only",
                                     out.eval_interval, out.eval_batches));
  }
  return ok_status();
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
  // The model file's size and time (a tokenizer.json's folder: the file in it), so an edited
  // tokenizer tokenizes again.
  std::filesystem::path file = model;
  if (!model.empty() && std::filesystem::is_directory(file, ec)) file /= "tokenizer.json";
  if (!model.empty() && std::filesystem::exists(file, ec)) {
    key += ":" + std::to_string(std::filesystem::file_size(file, ec));
    key += ":" + std::to_string(std::filesystem::last_write_time(file, ec).time_since_epoch().count());
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
  if (type == "hf") {
    KILN_RETURN_IF_ERROR(open_hf(config, out));
    data::BatchSplit split = data::make_batch_split(config.derived().mesh, config.derived().logical_axis_rules);
    KILN_RETURN_IF_ERROR(split.check_batch(config.derived().micro_batch_size));
    return out;
  }
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
