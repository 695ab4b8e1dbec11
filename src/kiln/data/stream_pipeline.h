// dataset_type=hf: documents streamed from files (Parquet, JSONL, JSONL.gz, JSONL.zst:
// sources/document_reader.h), tokenized and packed into batches as training needs them,
// never converting the corpus first.
//
// The stream. Epoch e visits the files in a permutation seeded by (data_shuffle_seed, e)
// (in name order with shuffle off), each file's documents in file order. A document becomes
// [BOS] tokens [EOS] and is cut into pieces of max_target_length (T) inputs exactly as the
// token pipeline does (pipeline.h): packing=true fills rows left to right, a piece that does
// not fit what is left of a row starting the next one; packing=false puts one piece per row.
// Global batch k is the next G rows of the stream. There is no shuffle buffer: documents
// keep their order within a file (the file order is what is shuffled), as a streamed
// Hugging Face dataset without .shuffle() reads.
//
// The position. Where batch k starts is a cursor (epoch, file, document in the file, piece
// of that document), kept for every batch built; the checkpoint stores the cursor of the
// next batch the step consumes, so a resumed run rebuilds exactly the batches the
// uninterrupted run saw, on any mesh: every process streams the same global batches and
// keeps the rows of its own devices. A restore skips to the cursor (Parquet skips whole row
// groups by their metadata; a compressed JSONL file is decompressed up to it).
//
// Background work. A reader thread reads documents ahead of the packing, in chunks whose
// texts `threads` threads tokenize; order and content do not depend on the thread count.
// Memory is bounded by the chunks queued (kChunksAhead x kChunkDocuments documents).
//
// Mixtures. Several sources (each its own files, weight and stream) blend by weight row by
// row: global row i of the run comes from the source whose share of [0, 1) holds the i-th
// point of a golden-ratio sequence, frac((i + 1/2) x 0.618...), so after n rows every source
// has within O(log n) rows of n x its weight, deterministically and whatever the mesh. Each
// source packs its own rows (a row never mixes sources); the position holds one cursor and
// one token count per source.
//
// Eval (split): with eval files of its own the eval stream reads them; otherwise every
// kEvalStride-th document of each file (by its index in the file, so the split does not
// depend on the file order) is held out of training and is the eval stream's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/data/batch_source.h"
#include "kiln/data/pipeline.h"
#include "kiln/data/sources/document_reader.h"
#include "kiln/data/tokenizer.h"

namespace kiln::data {

// Opens one file's documents (tests pass in-memory readers).
using ReaderFactory = std::function<Result<std::unique_ptr<DocumentReader>>(const std::string& path)>;

struct StreamOptions {
  int64_t global_batch = 1;  // G
  int64_t seq_len = 1;       // T
  int64_t model_vocab = 0;   // every id must be below it (0: do not check)
  bool add_bos = true, add_eos = true, packing = true;
  uint64_t seed = 0;
  bool shuffle_files = true;  // a per-epoch file permutation; false: name order every epoch
  Split split = Split::kAll;  // kTrain / kEval: every kEvalStride-th document of a file is eval's
  int threads = 1;            // tokenizer threads
};

// Where a batch starts in one source's stream.
struct StreamCursor {
  int64_t epoch = 0;
  int64_t file = 0;      // index into the epoch's file order
  int64_t document = 0;  // index of the document in that file (all documents, eval ones included)
  int64_t piece = 0;     // the first piece of that document still to place
  bool operator==(const StreamCursor&) const = default;
};

// One source of a stream: its files (sorted), how to open them, its mixture weight.
struct StreamSource {
  std::string name;  // in logs and metrics ("data" for a single source)
  std::vector<std::string> files;
  ReaderFactory open;
  double weight = 1;
};

class StreamPipeline final : public BatchSource {
 public:
  static constexpr int64_t kChunkDocuments = 256;
  static constexpr int64_t kChunksAhead = 4;

  // One source. `tokenizer` is shared by the background threads. Opens the first file of
  // each source to check it (a bad file is an error now, not at step 1000 -- later files
  // are checked when they are read).
  static Result<std::unique_ptr<StreamPipeline>> create(std::vector<std::string> files, ReaderFactory open,
                                                        std::shared_ptr<const Tokenizer> tokenizer,
                                                        const StreamOptions& options);
  // A mixture: weights > 0 (normalised here), names unique.
  static Result<std::unique_ptr<StreamPipeline>> create(std::vector<StreamSource> sources,
                                                        std::shared_ptr<const Tokenizer> tokenizer,
                                                        const StreamOptions& options);
  ~StreamPipeline() override;

  std::string type() const override { return "hf"; }
  int64_t global_batch() const override { return options_.global_batch; }
  // Builds global batch k (and every batch before it not built yet) from the stream. A
  // stream error (a corrupt file met mid-run) gives zero rows and is kept for status().
  Batch rows(int64_t k, int64_t first, int64_t count) override;
  Status status() const override;
  int64_t next_batch_index() const override;
  void advance() override;
  nlohmann::json state() const override;
  Status restore(const nlohmann::json& state) override;
  int64_t samples_per_epoch() const override { return -1; }

  // The same, returning the stream's errors.
  Result<Batch> try_rows(int64_t k, int64_t first, int64_t count);
  StreamCursor cursor_of(int64_t k, size_t source = 0) const;  // where batch k starts (built or restored)
  uint64_t fingerprint() const { return fingerprint_; }
  // Per source, in creation order: its name and the tokens (padding excluded) of the batches
  // before batch k (k built, restored or the start). consumed_tokens() is that for
  // next_batch_index(): what the steps so far trained on.
  std::vector<std::pair<std::string, int64_t>> tokens_before(int64_t k) const;
  std::vector<std::pair<std::string, int64_t>> consumed_tokens() const override;
  // The source of global row i (the mixture's schedule).
  size_t source_of_row(int64_t i) const;
  // Kept from building a batch until the step after it is consumed.
  std::optional<uint64_t> batch_hash(int64_t k) const override;

 private:
  class DocumentFeed;
  struct Source;
  struct Start {  // where a batch starts: a cursor and the tokens placed before, per source
    std::vector<StreamCursor> cursors;
    std::vector<int64_t> tokens;
  };
  StreamPipeline() = default;
  Status build_next();  // builds batch built_ + 1
  Status seek(const Start& at);
  Status next_row(Source& s, Batch& b, int64_t r);

  StreamOptions options_;
  std::vector<std::unique_ptr<Source>> sources_;
  std::vector<double> cumulative_;  // the sources' shares of [0, 1), cumulative
  std::shared_ptr<const Tokenizer> tokenizer_;
  uint64_t fingerprint_ = 0;

  mutable std::mutex mu_;              // guards everything below
  std::map<int64_t, Start> start_at_;  // batch -> where it starts
  int64_t next_batch_ = 0;             // the batch the step consumes next
  int64_t built_ = -1;                 // the last batch in `batch_`
  bool positioned_ = false;            // the sources' feeds stand at batch built_ + 1's start
  Batch batch_;                        // global batch built_, all rows
  Status error_ = ok_status();         // the first error rows() met
  std::map<int64_t, uint64_t> hash_of_;  // batch -> content hash, from building it
};

}  // namespace kiln::data
