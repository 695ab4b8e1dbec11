#include "kiln/data/pipeline.h"

#include <algorithm>
#include <numeric>

#include "kiln/base/check.h"
#include "kiln/base/hash.h"

namespace kiln::data {

namespace {

// A seeded Fisher-Yates shuffle with a counter-based generator (same order everywhere).
void shuffle(std::vector<int64_t>& v, uint64_t seed) {
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i) {
    uint64_t bits = mix64(hash_combine(seed, static_cast<uint64_t>(i)));
    std::swap(v[i], v[bits % static_cast<uint64_t>(i + 1)]);
  }
}

}  // namespace

Result<std::unique_ptr<TokenPipeline>> TokenPipeline::create(std::vector<std::unique_ptr<Shard>> shards,
                                                             const PipelineOptions& options) {
  if (options.seq_len < 1 || options.global_batch < 1) {
    return invalid_argument("max_target_length={} and the global batch {} must be >= 1", options.seq_len,
                            options.global_batch);
  }
  std::unique_ptr<TokenPipeline> p(new TokenPipeline());
  p->options_ = options;
  p->shards_ = std::move(shards);
  uint64_t fp = mix64(hash_combine(options.seed, static_cast<uint64_t>(options.seq_len)));
  fp = hash_combine(fp, (options.add_bos ? 1 : 0) | (options.add_eos ? 2 : 0) | (options.packing ? 4 : 0) |
                            (static_cast<int>(options.split) << 3));
  int64_t nonempty = 0;
  for (size_t s = 0; s < p->shards_.size(); ++s) {
    const Shard& shard = *p->shards_[s];
    const ShardInfo& info = shard.info();
    if (options.model_vocab > 0) {
      if (shard.num_tokens() > 0 && shard.max_token() >= static_cast<uint64_t>(options.model_vocab)) {
        return invalid_argument("{}: token id {} is not below the model's vocab_size={} (the shard was tokenized "
                                "with vocab {}); set vocab_size >= {}",
                                shard.path(), shard.max_token(), options.model_vocab, info.vocab_size,
                                info.vocab_size);
      }
      for (auto [key, on, id] : {std::tuple{"add_bos", options.add_bos, info.bos_id},
                                 std::tuple{"add_eos", options.add_eos, info.eos_id}}) {
        if (on && id == kNoToken) {
          return invalid_argument("{}: {}=true but the shard's tokenizer has no such token; set {}=false",
                                  shard.path(), key, key);
        }
        if (on && id >= static_cast<uint64_t>(options.model_vocab)) {
          return invalid_argument("{}: {} id {} is not below the model's vocab_size={}", shard.path(), key, id,
                                  options.model_vocab);
        }
      }
    }
    for (int64_t i = 0; i < shard.num_documents(); ++i) {
      int64_t size = shard.document_size(i);
      if (size == 0) continue;
      size += (options.add_bos ? 1 : 0) + (options.add_eos ? 1 : 0);
      if (size < 2) continue;  // no (input, target) pair
      const bool eval_doc = nonempty++ % kEvalStride == kEvalStride - 1;
      if ((options.split == Split::kTrain && eval_doc) || (options.split == Split::kEval && !eval_doc)) continue;
      p->docs_.push_back({static_cast<int32_t>(s), i, size});
      fp = hash_combine(fp, hash_combine(static_cast<uint64_t>(s), static_cast<uint64_t>(size)));
    }
  }
  if (p->docs_.empty()) {
    return invalid_argument("empty corpus: no {}document in the {} shard(s) has two tokens",
                            options.split == Split::kEval ? "eval (every 20th) " : "", p->shards_.size());
  }
  p->fingerprint_ = fp;

  // Documents in a seeded order, cut into pieces and laid out in rows.
  std::vector<int64_t> order(p->docs_.size());
  std::iota(order.begin(), order.end(), 0);
  shuffle(order, hash_combine(mix64(options.seed), 0x646f6373));  // "docs"
  const int64_t T = options.seq_len;
  std::vector<Piece> row;
  int64_t used = 0;
  for (int64_t d : order) {
    const int64_t inputs = p->docs_[d].size - 1;
    for (int64_t start = 0; start < inputs; start += T) {
      int64_t len = std::min(T, inputs - start);
      if (!options.packing || used + len > T) {
        if (!row.empty()) p->rows_.push_back(std::move(row));
        row.clear();
        used = 0;
      }
      row.push_back({static_cast<int32_t>(d), static_cast<int32_t>(start), static_cast<int32_t>(len)});
      used += len;
    }
  }
  if (!row.empty()) p->rows_.push_back(std::move(row));
  if (static_cast<int64_t>(p->rows_.size()) < options.global_batch) {
    return invalid_argument("the {}corpus packs into {} sequences of max_target_length={}, fewer than one global "
                            "batch of {}; use more data or a smaller batch or sequence length",
                            options.split == Split::kEval ? "eval split of the " : "", p->rows_.size(), T,
                            options.global_batch);
  }
  return p;
}

int32_t TokenPipeline::doc_token(const Doc& d, int64_t j) const {
  const bool bos = options_.add_bos;
  if (bos && j == 0) return static_cast<int32_t>(shards_[d.shard]->info().bos_id);
  if (options_.add_eos && j == d.size - 1) return static_cast<int32_t>(shards_[d.shard]->info().eos_id);
  return static_cast<int32_t>(shards_[d.shard]->token(d.index, j - (bos ? 1 : 0)));
}

int64_t TokenPipeline::row_of(int64_t sample) const {
  const int64_t n = samples_per_epoch();
  const int64_t epoch = sample / n;
  if (epoch != cached_epoch_) {
    permutation_.resize(static_cast<size_t>(n));
    std::iota(permutation_.begin(), permutation_.end(), 0);
    shuffle(permutation_, hash_combine(mix64(options_.seed), static_cast<uint64_t>(epoch) + 1));
    cached_epoch_ = epoch;
  }
  return permutation_[sample % n];
}

void TokenPipeline::fill_row(int64_t row, int64_t r, Batch& out) const {
  const int64_t T = options_.seq_len;
  int64_t t = 0;
  int32_t segment = 0;
  for (const Piece& piece : rows_[row]) {
    const Doc& d = docs_[piece.doc];
    ++segment;
    for (int64_t j = 0; j < piece.len; ++j, ++t) {
      const int64_t at = r * T + t;
      out.inputs[at] = doc_token(d, piece.start + j);
      out.targets[at] = doc_token(d, piece.start + j + 1);
      out.positions[at] = static_cast<int32_t>(j);
      out.segmentation[at] = segment;
    }
  }
  KILN_CHECK(t <= T);
}

Batch TokenPipeline::batch(int64_t k, int64_t shard, int64_t num_shards) const {
  const int64_t G = options_.global_batch;
  KILN_CHECK(num_shards >= 1 && G % num_shards == 0 && shard >= 0 && shard < num_shards);
  const int64_t rows_per_shard = G / num_shards;
  return rows(k, shard * rows_per_shard, rows_per_shard);
}

Batch TokenPipeline::rows(int64_t k, int64_t first, int64_t count) const {
  const int64_t G = options_.global_batch, T = options_.seq_len;
  KILN_CHECK(first >= 0 && count >= 0 && first + count <= G) << "rows [" << first << ", " << first + count
                                                               << ") of a global batch of " << G;
  Batch out = Batch::zeros(count, T);
  for (int64_t r = 0; r < count; ++r) fill_row(row_of(k * G + first + r), r, out);
  return out;
}

Batch TokenPipeline::next() {
  KILN_CHECK(next_sample_ % options_.global_batch == 0);
  Batch b = batch(next_sample_ / options_.global_batch);
  next_sample_ += options_.global_batch;
  return b;
}

nlohmann::json TokenPipeline::state() const {
  const IteratorState it = position();
  return {{"type", "tokens"}, {"sample", it.sample}, {"seed", it.seed}, {"fingerprint", it.fingerprint}};
}

Status TokenPipeline::restore(const nlohmann::json& state) {
  if (state.value("type", "") != "tokens") {
    return failed_precondition("the saved data iterator is of type {}; this run reads token shards (dataset_type=tokens "
                               "or text)",
                               state.value("type", "unknown"));
  }
  IteratorState it;
  it.sample = state.value("sample", int64_t{0});
  it.seed = state.value("seed", uint64_t{0});
  it.fingerprint = state.value("fingerprint", uint64_t{0});
  return restore_position(it);
}

Status TokenPipeline::restore_position(const IteratorState& state) {
  if (state.seed != options_.seed || state.fingerprint != fingerprint_) {
    return invalid_argument("the saved data iterator state is for another corpus or data_shuffle_seed (seed {} vs {}, "
                            "layout {:016x} vs {:016x})",
                            state.seed, options_.seed, state.fingerprint, fingerprint_);
  }
  if (state.sample < 0 || state.sample % options_.global_batch != 0) {
    return invalid_argument("saved data iterator sample index {} is not a multiple of the global batch {}",
                            state.sample, options_.global_batch);
  }
  next_sample_ = state.sample;
  return ok_status();
}

}  // namespace kiln::data
