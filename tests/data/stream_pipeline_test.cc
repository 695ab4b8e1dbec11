// The streaming pipeline (dataset_type=hf) on in-memory files: packing as the token pipeline
// packs, batches that do not depend on the tokenizer thread count, a restored position that
// rebuilds exactly the batches the uninterrupted stream made, earlier batches rebuilt on
// demand (eval restarts), the train/eval split, epochs, and one-line errors.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/stream_pipeline.h"
#include "kiln/data/tokenizer.h"

namespace kiln::data {
namespace {

// A file of documents held in memory.
class MemoryReader final : public DocumentReader {
 public:
  explicit MemoryReader(const std::vector<std::string>* docs) : docs_(docs) {}
  Result<bool> next(std::string* text) override {
    if (at_ >= docs_->size()) return false;
    *text = (*docs_)[at_++];
    return true;
  }
  Status skip(int64_t n) override {
    if (at_ + n > docs_->size()) return out_of_range_error(n);
    at_ += static_cast<size_t>(n);
    return ok_status();
  }
  int64_t num_documents() const override { return static_cast<int64_t>(docs_->size()); }

 private:
  Status out_of_range_error(int64_t n) const {
    return invalid_argument("skip {} past the end of {} documents", n, docs_->size());
  }
  const std::vector<std::string>* docs_;
  size_t at_ = 0;
};

using Files = std::map<std::string, std::vector<std::string>>;

// Documents of varied lengths: "d<i>:" then i % 23 letters (some longer than T).
Files make_files(int num_files, int docs_per_file) {
  Files files;
  int i = 0;
  for (int f = 0; f < num_files; ++f) {
    auto& docs = files["file" + std::to_string(f) + ".jsonl"];
    for (int d = 0; d < docs_per_file; ++d, ++i) docs.push_back("d" + std::to_string(i) + ":" + std::string(i % 23, 'a' + i % 26));
  }
  return files;
}

std::unique_ptr<StreamPipeline> make(const Files& files, StreamOptions o) {
  std::vector<std::string> names;
  for (const auto& [name, docs] : files) names.push_back(name);
  ReaderFactory open = [&files](const std::string& path) -> Result<std::unique_ptr<DocumentReader>> {
    return std::unique_ptr<DocumentReader>(new MemoryReader(&files.at(path)));
  };
  auto p = StreamPipeline::create(names, open, std::make_shared<ByteTokenizer>(), o);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(*p) : nullptr;
}

StreamOptions options(int64_t G, int64_t T) {
  StreamOptions o;
  o.global_batch = G;
  o.seq_len = T;
  o.model_vocab = 258;
  o.seed = 7;
  return o;
}

// Reassembles each document from the batch's segments (inputs, then the last target).
std::vector<std::vector<int32_t>> segments_of(const Batch& b) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t r = 0; r < b.batch; ++r) {
    int32_t current = 0;
    for (int64_t t = 0; t < b.seq_len; ++t) {
      const size_t at = static_cast<size_t>(r * b.seq_len + t);
      const int32_t seg = b.segmentation[at];
      if (seg == 0) continue;
      if (seg != current) {
        EXPECT_EQ(b.positions[at], 0) << "a segment starts at position 0";
        out.emplace_back();
        current = seg;
      }
      out.back().push_back(b.inputs[at]);
      if (t + 1 == b.seq_len || b.segmentation[at + 1] != seg) out.back().push_back(b.targets[at]);
    }
  }
  return out;
}

TEST(StreamPipeline, PacksTheDocumentsInFileOrderWithBosAndEos) {
  Files files = make_files(1, 40);
  StreamOptions o = options(4, 16);
  o.shuffle_files = false;
  auto p = make(files, o);
  std::vector<int32_t> stream;  // every placed (input, last target) token in order
  for (int k = 0; k < 3; ++k) {
    for (const auto& seg : segments_of(p->batch(k))) stream.insert(stream.end(), seg.begin(), seg.end());
  }
  // The same documents as BOS text EOS, cut into pieces of <= 16 inputs: each piece holds
  // len + 1 tokens, the next piece of the document repeating the boundary token.
  std::vector<int32_t> expected;
  for (const std::string& text : files.begin()->second) {
    std::vector<int32_t> doc = {ByteTokenizer::kBos};
    for (unsigned char ch : text) doc.push_back(ch);
    doc.push_back(ByteTokenizer::kEos);
    for (size_t start = 0; start + 1 < doc.size(); start += 16) {
      const size_t end = std::min(doc.size(), start + 17);
      expected.insert(expected.end(), doc.begin() + start, doc.begin() + end);
    }
  }
  ASSERT_LE(stream.size(), expected.size());
  EXPECT_TRUE(std::equal(stream.begin(), stream.end(), expected.begin()));
  EXPECT_GT(stream.size(), 100u);
}

TEST(StreamPipeline, BatchesDoNotDependOnTheTokenizerThreads) {
  Files files = make_files(3, 300);  // more than a chunk per file, and 100 batches go round again
  StreamOptions o = options(8, 32);
  auto one = make(files, o);
  o.threads = 3;
  auto three = make(files, o);
  for (int k = 0; k < 100; ++k) {
    Batch a = one->batch(k), b = three->batch(k);
    ASSERT_EQ(a.inputs, b.inputs) << "batch " << k;
    ASSERT_EQ(a.segmentation, b.segmentation) << "batch " << k;
  }
  EXPECT_GT(one->cursor_of(100).epoch, 0);  // the stream went round the files again
}

TEST(StreamPipeline, ARestoredPositionRebuildsTheSameBatches) {
  Files files = make_files(4, 90);
  StreamOptions o = options(3, 24);
  auto a = make(files, o);
  std::vector<Batch> seen;
  for (int k = 0; k < 30; ++k) seen.push_back(a->batch(k));
  // An earlier batch again (eval restarts at 0): rebuilt from its known start.
  EXPECT_EQ(a->batch(3).inputs, seen[3].inputs);
  EXPECT_EQ(a->batch(29).inputs, seen[29].inputs);
  const std::optional<uint64_t> hash29 = a->batch_hash(29);
  ASSERT_TRUE(hash29.has_value());
  EXPECT_NE(a->batch_hash(28), hash29);
  for (int k = 0; k < 17; ++k) a->advance();
  const nlohmann::json state = a->state();
  EXPECT_EQ(state["type"], "hf");
  EXPECT_EQ(state["batch"], 17);
  auto b = make(files, o);
  ASSERT_TRUE(b->restore(state).ok());
  EXPECT_EQ(b->next_batch_index(), 17);
  for (int k = 17; k < 30; ++k) {
    Batch x = b->batch(k);
    ASSERT_EQ(x.inputs, seen[k].inputs) << "batch " << k;
    ASSERT_EQ(x.targets, seen[k].targets) << "batch " << k;
    ASSERT_EQ(x.positions, seen[k].positions) << "batch " << k;
  }
  // Rows of one device come from the same global batch.
  Batch rows = b->rows(29, 1, 2);
  EXPECT_TRUE(std::equal(rows.inputs.begin(), rows.inputs.end(), seen[29].inputs.begin() + 24));
  EXPECT_EQ(b->batch_hash(29), hash29);  // the same content, the same hash

  o.seed = 8;
  auto c = make(files, o);
  Status s = c->restore(state);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("data_shuffle_seed"), std::string::npos) << s.message();
  nlohmann::json tokens = {{"type", "tokens"}, {"sample", 4}};
  EXPECT_EQ(b->restore(tokens).code(), StatusCode::kFailedPrecondition);
}

TEST(StreamPipeline, TheEvalSplitIsEveryTwentiethDocumentOfEachFile) {
  Files files = make_files(2, 100);
  StreamOptions o = options(1, 64);
  o.shuffle_files = false;
  o.packing = false;  // one piece per row: one document per batch (all are shorter than 64)
  o.split = Split::kTrain;
  auto train = make(files, o);
  o.split = Split::kEval;
  auto eval = make(files, o);
  auto text = [](const Batch& b) {
    std::string s;
    for (int64_t t = 1; t < b.seq_len && b.segmentation[t] != 0; ++t) s += static_cast<char>(b.inputs[t]);
    return s;
  };
  for (int k = 0; k < 10; ++k) {
    const std::string doc = text(eval->batch(k));
    const int file = k / 5, index = 19 + 20 * (k % 5);
    EXPECT_EQ(doc, files["file" + std::to_string(file) + ".jsonl"][index].substr(0, doc.size())) << k;
  }
  for (int k = 0; k < 190; ++k) {
    const std::string doc = text(train->batch(k));
    EXPECT_NE(doc.find(':'), std::string::npos);
    const int id = std::stoi(doc.substr(1, doc.find(':') - 1));
    EXPECT_NE(id % 100 % 20, 19) << "eval document " << id << " in training";
  }
}

TEST(StreamPipeline, OneLineErrors) {
  Files empty;
  empty["a.jsonl"] = {"", "", ""};
  StreamOptions o = options(2, 8);
  auto p = make(empty, o);
  Result<Batch> b = p->try_rows(0, 0, 2);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("empty stream: no document of the 1 file(s) (a.jsonl) has two tokens"),
            std::string::npos)
      << b.status().message();

  Files files = make_files(1, 5);
  o.model_vocab = 100;  // bytes above 99 and BOS/EOS do not fit
  std::vector<std::string> names = {files.begin()->first};
  ReaderFactory open = [&files](const std::string& path) -> Result<std::unique_ptr<DocumentReader>> {
    return std::unique_ptr<DocumentReader>(new MemoryReader(&files.at(path)));
  };
  auto small = StreamPipeline::create(names, open, std::make_shared<ByteTokenizer>(), o);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("add_bos id 256 of tokenizer bytes is not below the model's vocab_size=100"),
            std::string::npos)
      << small.status().message();
  o.add_bos = o.add_eos = false;
  auto no_special = StreamPipeline::create(names, open, std::make_shared<ByteTokenizer>(), o);
  ASSERT_TRUE(no_special.ok());
  Result<Batch> high = (*no_special)->try_rows(0, 0, 2);
  ASSERT_FALSE(high.ok());
  EXPECT_NE(high.status().message().find("file0.jsonl: document 0 has token id 100, not below the model's "
                                         "vocab_size=100"),
            std::string::npos)
      << high.status().message();
}

// A 70/30 mixture: rows by weight (a golden-ratio schedule: within a few rows of the weights
// at every length), tokens per source within 2 % of the weights, each source's rows from its
// own files only, and a restored mixture continuing with the same batches and counts.
TEST(StreamPipeline, AMixtureBlendsSourcesByWeight) {
  Files files;
  const Files web = make_files(2, 200), code = make_files(1, 150);
  for (const auto& [name, docs] : web) files["web/" + name] = docs;
  for (const auto& [name, docs] : code) {
    for (const std::string& d : docs) files["code/" + name].push_back("#" + d);  // '#' marks a code document
  }
  ReaderFactory open = [&files](const std::string& path) -> Result<std::unique_ptr<DocumentReader>> {
    return std::unique_ptr<DocumentReader>(new MemoryReader(&files.at(path)));
  };
  std::vector<StreamSource> sources(2);
  sources[0] = {"web", {"web/file0.jsonl", "web/file1.jsonl"}, open, 7};
  sources[1] = {"code", {"code/file0.jsonl"}, open, 3};
  StreamOptions o = options(8, 32);
  auto make_mixture = [&] {
    auto p = StreamPipeline::create(sources, std::make_shared<ByteTokenizer>(), o);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return std::move(*p);
  };
  auto p = make_mixture();
  int64_t code_rows = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    code_rows += p->source_of_row(i) == 1 ? 1 : 0;
    EXPECT_NEAR(static_cast<double>(code_rows), 0.3 * static_cast<double>(i + 1), 2.0) << "after " << i + 1 << " rows";
  }
  std::vector<Batch> seen;
  for (int k = 0; k < 60; ++k) {
    seen.push_back(p->batch(k));
    // A row is from one source: '#' (code) documents only in code rows.
    for (int64_t r = 0; r < 8; ++r) {
      const bool code_row = p->source_of_row(k * 8 + r) == 1;
      for (int64_t t = 0; t < 32; ++t) {
        const int32_t id = seen.back().inputs[r * 32 + t];
        if (id == '#') {
          EXPECT_TRUE(code_row) << "batch " << k << " row " << r;
        }
        if (id == 'd' && t > 0 && seen.back().inputs[r * 32 + t - 1] == ByteTokenizer::kBos) {
          EXPECT_FALSE(code_row) << "batch " << k << " row " << r;
        }
      }
    }
  }
  const auto tokens = p->tokens_before(60);
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].first, "web");
  EXPECT_EQ(tokens[1].first, "code");
  const double share = static_cast<double>(tokens[1].second) / static_cast<double>(tokens[0].second + tokens[1].second);
  EXPECT_NEAR(share, 0.3, 0.02) << tokens[0].second << " web, " << tokens[1].second << " code";
  for (int k = 0; k < 40; ++k) p->advance();
  EXPECT_EQ(p->consumed_tokens(), p->tokens_before(40));
  auto q = make_mixture();
  ASSERT_TRUE(q->restore(p->state()).ok());
  EXPECT_EQ(q->consumed_tokens(), p->tokens_before(40));
  for (int k = 40; k < 60; ++k) ASSERT_EQ(q->batch(k).inputs, seen[k].inputs) << "batch " << k;
  EXPECT_EQ(q->tokens_before(60), tokens);

  sources[1].weight = 0;
  auto bad = StreamPipeline::create(sources, std::make_shared<ByteTokenizer>(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "data source code has weight 0: weights must be > 0");
}

}  // namespace
}  // namespace kiln::data
