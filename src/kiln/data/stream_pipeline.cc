#include "kiln/data/stream_pipeline.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string_view>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "kiln/base/check.h"
#include "kiln/base/hash.h"

namespace kiln::data {

namespace {

// The files of epoch e in the order they are read: a seeded Fisher-Yates permutation of
// 0..n-1 (the same everywhere), or name order.
std::vector<int64_t> file_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  const uint64_t s = hash_combine(mix64(seed), hash_combine(0x66696c6573, static_cast<uint64_t>(epoch)));  // "files"
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bits = mix64(hash_combine(s, static_cast<uint64_t>(i)));
    std::swap(order[i], order[bits % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

constexpr double kGolden = 0.6180339887498949;

bool in_split(Split split, int64_t document) {
  const bool eval = document % kEvalStride == kEvalStride - 1;
  return split == Split::kAll || (split == Split::kEval) == eval;
}

}  // namespace

// Threads that stay for the feed's life (a tokenizer's per-thread caches of merged pieces
// stay warm): run(n, fn) calls fn(i) for i < n, i = t mod threads on thread t, the calling
// thread being thread 0, and returns when all are done.
class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int t = 1; t < std::max(1, threads); ++t) workers_.emplace_back([this, t] { loop(t); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void run(size_t n, const std::function<void(size_t)>& fn) {
    const size_t threads = workers_.size() + 1;
    if (threads == 1 || n < 2) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      pending_ = workers_.size();
      ++generation_;
    }
    cv_.notify_all();
    for (size_t i = 0; i < n; i += threads) fn(i);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  void loop(int t) {
    uint64_t seen = 0;
    while (true) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const std::function<void(size_t)>* fn = fn_;
      const size_t n = n_, threads = workers_.size() + 1;
      lock.unlock();
      for (size_t i = static_cast<size_t>(t); i < n; i += threads) (*fn)(i);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

// One source: what it reads and where its packing stands.
struct StreamPipeline::Source {
  std::string name;
  std::vector<std::string> files;
  ReaderFactory open;
  double weight = 1;
  std::unique_ptr<DocumentFeed> feed;
  // The document being cut into pieces: its tokens with BOS/EOS and its cursor.
  std::vector<int32_t> doc;
  StreamCursor doc_at;
  int64_t tokens = 0;  // placed so far, up to the batch being built
};

// Reads and tokenizes one source's documents ahead of the packing on its own thread, from a
// cursor on; hands them out in stream order with the cursor of each (piece 0).
class StreamPipeline::DocumentFeed {
 public:
  DocumentFeed(const Source& source, const StreamOptions& options, const Tokenizer& tokenizer, StreamCursor start)
      : source_(source), options_(options), tokenizer_(tokenizer), start_(start) {
    thread_ = std::thread([this] { run(); });
  }
  ~DocumentFeed() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // The next document of the split with at least two tokens (with BOS/EOS).
  Status next(std::vector<int32_t>* tokens, StreamCursor* at) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || !error_.ok(); });
    if (ready_.empty()) return error_;
    Doc& d = ready_.front();
    *tokens = std::move(d.tokens);
    *at = d.at;
    at->piece = 0;
    ready_.pop_front();
    if (ready_.size() < static_cast<size_t>(kChunkDocuments)) cv_.notify_all();
    return ok_status();
  }

 private:
  struct Doc {
    std::vector<int32_t> tokens;
    StreamCursor at;
    const std::string* path;  // into source_.files
  };

  void run() {
    Status s = produce();
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) error_ = s;
    cv_.notify_all();
  }

  bool stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }

  // Tokens of each text with BOS/EOS, on up to options.threads threads; an id the model
  // cannot embed is an error naming the document.
  Status tokenize(std::vector<std::string>& texts, std::vector<Doc>& docs) {
    const StreamOptions& o = options_;
    const Tokenizer& tok = tokenizer_;
    auto one = [&](size_t i) {
      std::vector<int32_t> ids = tok.encode(texts[i]);
      std::vector<int32_t>& out = docs[i].tokens;
      out.clear();
      if (ids.empty()) return;  // an empty document places nothing, as in the token pipeline
      out.reserve(ids.size() + 2);
      if (o.add_bos) out.push_back(tok.bos_id());
      out.insert(out.end(), ids.begin(), ids.end());
      if (o.add_eos) out.push_back(tok.eos_id());
    };
    pool_.run(texts.size(), one);
    if (o.model_vocab > 0) {
      for (const Doc& d : docs) {
        for (int32_t id : d.tokens) {
          if (id < 0 || id >= o.model_vocab) {
            return invalid_argument("{}: document {} has token id {}, not below the model's vocab_size={} "
                                    "(tokenizer {} has vocab {}); set vocab_size >= {}",
                                    *d.path, d.at.document, id, o.model_vocab, tok.name(),
                                    tok.vocab_size(), tok.vocab_size());
          }
        }
      }
    }
    return ok_status();
  }

  Status produce() {
    const StreamOptions& o = options_;
    const int64_t num_files = static_cast<int64_t>(source_.files.size());
    StreamCursor c{start_.epoch, start_.file, start_.document, 0};
    order_ = file_order(num_files, o.seed, c.epoch, o.shuffle_files);
    std::unique_ptr<DocumentReader> reader;
    // A whole epoch without a usable document would loop for ever: counted from the first
    // epoch read from its beginning.
    bool whole_epoch = c.file == 0 && c.document == 0;
    int64_t usable_this_epoch = 0;
    while (!stopping()) {
      std::vector<std::string> texts;
      std::vector<Doc> docs;
      while (static_cast<int64_t>(texts.size()) < kChunkDocuments) {
        if (!reader) {
          const std::string& path = source_.files[order_[c.file]];
          KILN_ASSIGN_OR_RETURN(reader, source_.open(path));
          if (c.document > 0) KILN_RETURN_IF_ERROR(reader->skip(c.document));
        }
        std::string text;
        KILN_ASSIGN_OR_RETURN(bool more, reader->next(&text));
        if (!more) {
          // This file's last documents go out first, so they count for the epoch below; the
          // reader stays at its end and says so again on the next round.
          if (!texts.empty()) break;
          reader.reset();
          c.document = 0;
          if (++c.file == num_files) {
            if (whole_epoch && usable_this_epoch == 0) {
              return invalid_argument("empty stream: no {}document of the {} file(s) ({}{}) has two tokens",
                                      o.split == Split::kEval ? "eval (every 20th) " : "", num_files, source_.files[0],
                                      num_files > 1 ? ", ..." : "");
            }
            c.file = 0;
            ++c.epoch;
            order_ = file_order(num_files, o.seed, c.epoch, o.shuffle_files);
            whole_epoch = true;
            usable_this_epoch = 0;
          }
          continue;
        }
        if (in_split(o.split, c.document)) {
          texts.push_back(std::move(text));
          docs.push_back({{}, c, &source_.files[order_[c.file]]});
        }
        ++c.document;
      }
      if (texts.empty()) continue;
      KILN_RETURN_IF_ERROR(tokenize(texts, docs));
      std::unique_lock<std::mutex> lock(mu_);
      for (Doc& d : docs) {
        if (d.tokens.size() < 2) continue;  // no (input, target) pair
        ++usable_this_epoch;
        ready_.push_back(std::move(d));
      }
      cv_.notify_all();
      cv_.wait(lock, [&] { return stop_ || ready_.size() < static_cast<size_t>(kChunksAhead * kChunkDocuments); });
    }
    return ok_status();
  }

  const Source& source_;
  const StreamOptions& options_;
  const Tokenizer& tokenizer_;
  const StreamCursor start_;
  WorkerPool pool_{options_.threads};
  std::vector<int64_t> order_;  // this epoch's file order (the producer thread's)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Doc> ready_;
  Status error_ = ok_status();
  bool stop_ = false;
  std::thread thread_;
};

Result<std::unique_ptr<StreamPipeline>> StreamPipeline::create(std::vector<std::string> files, ReaderFactory open,
                                                               std::shared_ptr<const Tokenizer> tokenizer,
                                                               const StreamOptions& options) {
  std::vector<StreamSource> one(1);
  one[0].name = "data";
  one[0].files = std::move(files);
  one[0].open = std::move(open);
  return create(std::move(one), std::move(tokenizer), options);
}

Result<std::unique_ptr<StreamPipeline>> StreamPipeline::create(std::vector<StreamSource> sources,
                                                               std::shared_ptr<const Tokenizer> tokenizer,
                                                               const StreamOptions& options) {
  if (options.seq_len < 1 || options.global_batch < 1) {
    return invalid_argument("max_target_length={} and the global batch {} must be >= 1", options.seq_len,
                            options.global_batch);
  }
  if (sources.empty()) return invalid_argument("no data sources to stream");
  for (auto [key, on, id] : {std::tuple{"add_bos", options.add_bos, tokenizer->bos_id()},
                             std::tuple{"add_eos", options.add_eos, tokenizer->eos_id()}}) {
    if (on && id < 0) {
      return invalid_argument("{}=true but tokenizer {} has no such token; set {}=false", key, tokenizer->name(), key);
    }
    if (on && options.model_vocab > 0 && id >= options.model_vocab) {
      return invalid_argument("{} id {} of tokenizer {} is not below the model's vocab_size={}", key, id,
                              tokenizer->name(), options.model_vocab);
    }
  }
  std::unique_ptr<StreamPipeline> p(new StreamPipeline());
  p->options_ = options;
  p->tokenizer_ = std::move(tokenizer);
  uint64_t fp = mix64(hash_combine(options.seed, static_cast<uint64_t>(options.seq_len)));
  fp = hash_combine(fp, (options.add_bos ? 1 : 0) | (options.add_eos ? 2 : 0) | (options.packing ? 4 : 0) |
                            (options.shuffle_files ? 8 : 0) | (static_cast<int>(options.split) << 4));
  fp = hash_combine(fp, static_cast<uint64_t>(p->tokenizer_->vocab_size()));
  double total = 0;
  for (StreamSource& source : sources) {
    if (source.files.empty()) return invalid_argument("data source {} has no files", source.name);
    if (!(source.weight > 0)) {
      return invalid_argument("data source {} has weight {}: weights must be > 0", source.name, source.weight);
    }
    for (const auto& other : p->sources_) {
      if (other->name == source.name) return invalid_argument("two data sources are named {}", source.name);
    }
    // The first file must open: a wrong column or a corrupt file is an error before training.
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<DocumentReader> first, source.open(source.files.front()));
    first.reset();
    fp = hash_combine(fp, hash_combine(fnv1a64(source.name), std::bit_cast<uint64_t>(source.weight)));
    for (const std::string& f : source.files) {
      // The file's name and size, not its folder: a corpus copied elsewhere resumes.
      std::error_code ec;
      const auto size = std::filesystem::file_size(f, ec);
      fp = hash_combine(fp, hash_combine(fnv1a64(std::filesystem::path(f).filename().string()),
                                         ec ? 0 : static_cast<uint64_t>(size)));
    }
    auto s = std::make_unique<Source>();
    s->name = std::move(source.name);
    s->files = std::move(source.files);
    s->open = std::move(source.open);
    s->weight = source.weight;
    total += s->weight;
    p->sources_.push_back(std::move(s));
  }
  double at = 0;
  for (const auto& s : p->sources_) p->cumulative_.push_back(at += s->weight / total);
  p->cumulative_.back() = 1.0;
  p->fingerprint_ = fp;
  p->start_at_[0] = Start{std::vector<StreamCursor>(p->sources_.size()), std::vector<int64_t>(p->sources_.size(), 0)};
  return p;
}

StreamPipeline::~StreamPipeline() {
  for (auto& s : sources_) s->feed.reset();  // the feeds' threads read the sources
}

size_t StreamPipeline::source_of_row(int64_t i) const {
  if (sources_.size() == 1) return 0;
  const double x = static_cast<double>(i) + 0.5;
  const double u = x * kGolden - std::floor(x * kGolden);
  return static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
}

Status StreamPipeline::seek(const Start& at) {
  for (size_t i = 0; i < sources_.size(); ++i) {
    Source& s = *sources_[i];
    const StreamCursor& c = at.cursors[i];
    s.feed.reset();
    s.feed = std::make_unique<DocumentFeed>(s, options_, *tokenizer_, c);
    KILN_RETURN_IF_ERROR(s.feed->next(&s.doc, &s.doc_at));
    // A cursor other than the stream's start names a document that was placed before, so the
    // feed meets it first.
    const bool start = c == StreamCursor{};
    if (!start && (s.doc_at.epoch != c.epoch || s.doc_at.file != c.file || s.doc_at.document != c.document)) {
      return data_loss("the data stream of source {} changed: the saved position (epoch {}, file {} of the epoch's "
                       "order, document {}) is not a usable document now (the next one is file {}, document {})",
                       s.name, c.epoch, c.file, c.document, s.doc_at.file, s.doc_at.document);
    }
    if (!start) s.doc_at.piece = c.piece;
    s.tokens = at.tokens[i];
  }
  positioned_ = true;
  return ok_status();
}

// Packs row r of `b` from source s's stream, as the token pipeline packs its rows.
Status StreamPipeline::next_row(Source& s, Batch& b, int64_t r) {
  const int64_t T = options_.seq_len;
  int64_t used = 0;
  int32_t segment = 0;
  while (true) {
    const int64_t inputs = static_cast<int64_t>(s.doc.size()) - 1;
    const int64_t start = s.doc_at.piece * T;
    const int64_t len = std::min(T, inputs - start);
    if (used > 0 && (!options_.packing || used + len > T)) break;  // the row is full
    ++segment;
    for (int64_t j = 0; j < len; ++j) {
      const size_t at = static_cast<size_t>(r * T + used + j);
      b.inputs[at] = s.doc[start + j];
      b.targets[at] = s.doc[start + j + 1];
      b.positions[at] = static_cast<int32_t>(j);
      b.segmentation[at] = segment;
    }
    used += len;
    if (start + len < inputs) {
      ++s.doc_at.piece;
    } else {
      KILN_RETURN_IF_ERROR(s.feed->next(&s.doc, &s.doc_at));  // always one document ahead: the next cursor
    }
    if (!options_.packing || used == T) break;
  }
  s.tokens += used;
  return ok_status();
}

Status StreamPipeline::build_next() {
  const int64_t k = built_ + 1, G = options_.global_batch, T = options_.seq_len;
  Batch b = Batch::zeros(G, T);
  for (int64_t r = 0; r < G; ++r) KILN_RETURN_IF_ERROR(next_row(*sources_[source_of_row(k * G + r)], b, r));
  uint64_t h = 0xcbf29ce484222325ull;
  for (const std::vector<int32_t>* v : {&b.inputs, &b.targets, &b.positions, &b.segmentation}) {
    h = fnv1a64(std::string_view(reinterpret_cast<const char*>(v->data()), v->size() * sizeof(int32_t)), h);
  }
  hash_of_[k] = h;
  batch_ = std::move(b);
  built_ = k;
  Start next;
  for (const auto& s : sources_) {
    next.cursors.push_back(s->doc_at);
    next.tokens.push_back(s->tokens);
  }
  start_at_[k + 1] = std::move(next);
  return ok_status();
}

Result<Batch> StreamPipeline::try_rows(int64_t k, int64_t first, int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t G = options_.global_batch;
  KILN_CHECK(k >= 0 && first >= 0 && count >= 0 && first + count <= G)
      << "rows [" << first << ", " << first + count << ") of global batch " << k << " of " << G;
  if (k != built_) {
    // Continue the stream where it stands (at batch built_ + 1's start), or go to the nearest
    // known start at or before k.
    if (!positioned_ || k <= built_) {
      auto it = start_at_.upper_bound(k);
      KILN_CHECK(it != start_at_.begin()) << "no known position at or before batch " << k;
      --it;
      positioned_ = false;
      KILN_RETURN_IF_ERROR(seek(it->second));
      built_ = it->first - 1;
    }
    while (built_ < k) {
      Status s = build_next();
      if (!s.ok()) {
        positioned_ = false;  // a later call starts again from a known position
        return s;
      }
    }
  }
  if (first == 0 && count == G) return batch_;
  Batch out;
  out.batch = count;
  out.seq_len = options_.seq_len;
  const auto begin = static_cast<size_t>(first * options_.seq_len);
  const auto end = static_cast<size_t>((first + count) * options_.seq_len);
  out.inputs.assign(batch_.inputs.begin() + begin, batch_.inputs.begin() + end);
  out.targets.assign(batch_.targets.begin() + begin, batch_.targets.begin() + end);
  out.positions.assign(batch_.positions.begin() + begin, batch_.positions.begin() + end);
  out.segmentation.assign(batch_.segmentation.begin() + begin, batch_.segmentation.begin() + end);
  return out;
}

Batch StreamPipeline::rows(int64_t k, int64_t first, int64_t count) {
  Result<Batch> b = try_rows(k, first, count);
  if (b.ok()) return std::move(*b);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = b.status();
  }
  return Batch::zeros(count, options_.seq_len);
}

Status StreamPipeline::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

int64_t StreamPipeline::next_batch_index() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_batch_;
}

void StreamPipeline::advance() {
  std::lock_guard<std::mutex> lock(mu_);
  ++next_batch_;
  // Batches before the one just consumed are never asked for again (only an eval stream,
  // which never advances, goes back): their positions and hashes go.
  start_at_.erase(start_at_.begin(), start_at_.lower_bound(next_batch_ - 1));
  hash_of_.erase(hash_of_.begin(), hash_of_.lower_bound(next_batch_ - 1));
}

std::optional<uint64_t> StreamPipeline::batch_hash(int64_t k) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hash_of_.find(k);
  if (it == hash_of_.end()) return std::nullopt;
  return it->second;
}

StreamCursor StreamPipeline::cursor_of(int64_t k, size_t source) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = start_at_.find(k);
  KILN_CHECK(it != start_at_.end()) << "batch " << k << " has not been built";
  return it->second.cursors.at(source);
}

std::vector<std::pair<std::string, int64_t>> StreamPipeline::tokens_before(int64_t k) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = start_at_.find(k);
  std::vector<std::pair<std::string, int64_t>> out;
  if (it == start_at_.end()) return out;
  for (size_t i = 0; i < sources_.size(); ++i) out.emplace_back(sources_[i]->name, it->second.tokens[i]);
  return out;
}

std::vector<std::pair<std::string, int64_t>> StreamPipeline::consumed_tokens() const {
  return tokens_before(next_batch_index());
}

nlohmann::json StreamPipeline::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = start_at_.find(next_batch_);
  // The step consumed batch next_batch_ - 1, which was built, and building it recorded this.
  KILN_CHECK(it != start_at_.end()) << "the position of batch " << next_batch_ << " is not known";
  nlohmann::json sources = nlohmann::json::array();
  for (size_t i = 0; i < sources_.size(); ++i) {
    const StreamCursor& c = it->second.cursors[i];
    sources.push_back({{"name", sources_[i]->name},
                       {"epoch", c.epoch},
                       {"file", c.file},
                       {"document", c.document},
                       {"piece", c.piece},
                       {"tokens", it->second.tokens[i]}});
  }
  return {{"type", "hf"},
          {"batch", next_batch_},
          {"sources", sources},
          {"seed", options_.seed},
          {"fingerprint", fingerprint_}};
}

Status StreamPipeline::restore(const nlohmann::json& state) {
  if (state.value("type", "") != "hf") {
    return failed_precondition("the saved data iterator is of type {}, this run streams dataset_type=hf",
                               state.value("type", "unknown"));
  }
  const uint64_t seed = state.value("seed", uint64_t{0}), fp = state.value("fingerprint", uint64_t{0});
  if (seed != options_.seed || fp != fingerprint_) {
    return invalid_argument("the saved data iterator state is for other files, sources, weights, tokenizer, "
                            "data_shuffle_seed or packing (seed {} vs {}, layout {:016x} vs {:016x})",
                            seed, options_.seed, fp, fingerprint_);
  }
  const int64_t batch = state.value("batch", int64_t{-1});
  const nlohmann::json sources = state.value("sources", nlohmann::json::array());
  Start start;
  bool ok = batch >= 0 && sources.is_array() && sources.size() == sources_.size();
  for (size_t i = 0; ok && i < sources.size(); ++i) {
    const nlohmann::json& j = sources[i];
    StreamCursor c;
    c.epoch = j.value("epoch", int64_t{-1});
    c.file = j.value("file", int64_t{-1});
    c.document = j.value("document", int64_t{-1});
    c.piece = j.value("piece", int64_t{-1});
    ok = j.value("name", "") == sources_[i]->name && c.epoch >= 0 && c.file >= 0 &&
         c.file < static_cast<int64_t>(sources_[i]->files.size()) && c.document >= 0 && c.piece >= 0;
    start.cursors.push_back(c);
    start.tokens.push_back(j.value("tokens", int64_t{0}));
  }
  if (!ok) return invalid_argument("the saved data iterator position is malformed: {}", state.dump());
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : sources_) s->feed.reset();
  positioned_ = false;
  start_at_.clear();
  start_at_[batch] = std::move(start);
  next_batch_ = batch;
  built_ = batch - 1;
  return ok_status();
}

}  // namespace kiln::data
