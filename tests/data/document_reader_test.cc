// The streaming document readers (src/kiln/data/sources/) on small datasets each case writes
// here: Parquet through the venv's pyarrow (the same library Hugging Face datasets writes
// with), gzip through Python's gzip, zstd through pyarrow's codec, plain JSONL from C++. Every
// document read back must equal what was written, in order; skip(n) must land where reading n
// lands; each bad input must give one line naming the file and what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/data/sources/document_reader.h"
#include "tests/testing/cli.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

// Seeded documents with what breaks naive readers: quotes, backslashes, newlines and CR
// inside a document, tabs, multi-byte UTF-8, JSON-looking text, empty documents, and one
// document of ~1.3 MB (longer than the JSONL reader's 1 MiB input chunk).
std::vector<std::string> make_documents(int n, uint32_t seed) {
  static const std::vector<std::string> kPieces = {
      "the", "quick", "brown", "fox", "Köln", "日本語のテキスト", "😀👍🏽", "\"quoted\"", "back\\slash", "tab\there",
      "line\nbreak", "cr\r\nlf", "{\"json\": [1, 2]}", "naïve", "Ελληνικά", "1234567890", "",
  };
  std::mt19937 rng(seed);
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) {
    std::string doc;
    int words = (i % 11 == 4) ? 0 : 1 + static_cast<int>(rng() % 40);  // every 11th empty
    if (i == 40) words = 120000;
    for (int w = 0; w < words; ++w) doc += (w ? " " : "") + kPieces[rng() % kPieces.size()];
    docs.push_back(doc);
  }
  return docs;
}

class DocumentReaderTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes `docs` to docs.json (null where `nulls` says), for the Python snippets to read.
  void write_docs_json(const std::vector<std::string>& docs, const std::vector<int>& nulls = {}) {
    nlohmann::json j = docs;
    for (int i : nulls) j[i] = nullptr;
    std::ofstream(path("docs.json")) << j.dump();
  }

  // Runs `code` in the venv's Python with `d` (this case's folder), `docs` (docs.json, if
  // written), pyarrow as pa and pyarrow.parquet as pq.
  void python(const std::string& code) {
    const std::string python = KILN_VENV_PYTHON;
    ASSERT_TRUE(fs::exists(python)) << python << " is missing: run scripts/setup_venv.sh (pyarrow from PyPI)";
    const std::string script = path("make_data.py");
    std::ofstream(script) << "import gzip, json, os, sys\n"
                             "import pyarrow as pa, pyarrow.parquet as pq\n"
                             "d = sys.argv[1]\n"
                             "p = lambda name: os.path.join(d, name)\n"
                             "docs = json.load(open(p('docs.json'), encoding='utf-8')) if os.path.exists(p('docs.json')) else []\n"
                             "def jsonl(docs, field='text'):\n"
                             "    return ''.join(json.dumps({'id': i, field: t}, ensure_ascii=False) + '\\n'\n"
                             "                   for i, t in enumerate(docs)).encode('utf-8')\n"
                          << code << "\n";
    testing::CliRun run = testing::run_command(python, "'" + script + "' '" + dir_.string() + "'");
    ASSERT_EQ(run.exit_code, 0) << run.err;
  }

  void write_file(const std::string& name, const std::string& bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }

  fs::path dir_ = testing::fresh_temp_dir("document_reader");
};

std::vector<std::string> read_all(const std::string& path, const std::string& column = "text") {
  std::vector<std::string> docs;
  auto reader = open_document_reader(path, column);
  EXPECT_TRUE(reader.ok()) << reader.status().message();
  if (!reader.ok()) return docs;
  std::string text;
  for (;;) {
    auto more = (*reader)->next(&text);
    EXPECT_TRUE(more.ok()) << more.status().message();
    if (!more.ok() || !*more) break;
    docs.push_back(text);
  }
  auto again = (*reader)->next(&text);  // the end stays the end
  EXPECT_TRUE(again.ok() && !*again);
  return docs;
}

// The first error reading `path` to its end (open included), or "" if there is none.
std::string first_error(const std::string& path, const std::string& column = "text") {
  auto reader = open_document_reader(path, column);
  if (!reader.ok()) return reader.status().message();
  std::string text;
  for (;;) {
    auto more = (*reader)->next(&text);
    if (!more.ok()) return more.status().message();
    if (!*more) return "";
  }
}

void expect_error(const std::string& message, const std::vector<std::string>& parts) {
  EXPECT_FALSE(message.empty()) << "expected an error";
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "no '" << part << "' in: " << message;
}

// Random runs of skips and reads from fresh readers must see expected[i] at every index a
// read lands on, and the end where the documents end.
void expect_skips_match_reads(const std::string& path, const std::vector<std::string>& expected, uint32_t seed,
                              int64_t max_skip = 30) {
  const int64_t n = static_cast<int64_t>(expected.size());
  std::mt19937 rng(seed);
  std::string text;
  for (int trial = 0; trial < 12; ++trial) {
    auto reader = open_document_reader(path, "text");
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    int64_t at = 0;
    while (at < n) {
      int64_t k = rng() % (std::min<int64_t>(n - at, trial < 6 ? 9 : max_skip) + 1);
      ASSERT_TRUE((*reader)->skip(k).ok()) << "skip " << k << " at " << at;
      at += k;
      auto more = (*reader)->next(&text);
      ASSERT_TRUE(more.ok()) << more.status().message();
      if (at == n) {
        EXPECT_FALSE(*more) << "read past the end after skipping to it";
        break;
      }
      ASSERT_TRUE(*more) << "ended at " << at << " of " << n;
      ASSERT_EQ(text, expected[at]) << "document " << at << " (trial " << trial << ")";
      ++at;
    }
  }
  // Whole-file skips: to the end exactly, then past it.
  auto reader = open_document_reader(path, "text");
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE((*reader)->skip(0).ok());
  ASSERT_TRUE((*reader)->skip(n).ok());
  auto more = (*reader)->next(&text);
  EXPECT_TRUE(more.ok() && !*more);
  reader = open_document_reader(path, "text");
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE((*reader)->next(&text).ok());
  Status past = (*reader)->skip(n);
  expect_error(past.message(), {path, "out of range", "has " + std::to_string(n) + " documents"});
  more = (*reader)->next(&text);  // and the reader is at the end
  EXPECT_TRUE(more.ok() && !*more);
}

TEST_F(DocumentReaderTest, ParquetReadsEveryDocumentInOrderAcrossRowGroupsAndStringTypes) {
  std::vector<std::string> docs = make_documents(60, 1);
  write_docs_json(docs, /*nulls=*/{3});
  docs[3] = "";  // a null row is an empty document
  ASSERT_NO_FATAL_FAILURE(python(R"(
ids = pa.array(range(len(docs)), pa.int64())
pq.write_table(pa.table({'id': ids, 'text': pa.array(docs, pa.string())}), p('string.parquet'), row_group_size=7)
pq.write_table(pa.table({'text': pa.array(docs, pa.large_string()), 'id': ids}), p('large.parquet'),
               row_group_size=5, compression='zstd')
pq.write_table(pa.table({'text': pa.array(docs, pa.string_view())}), p('view.parquet'), row_group_size=9,
               compression='gzip')
pq.write_table(pa.table({'text': pa.array(docs, pa.string())}), p('one_group.parquet'))
assert pq.ParquetFile(p('string.parquet')).metadata.num_row_groups == 9
)"));
  for (const char* name : {"string.parquet", "large.parquet", "view.parquet", "one_group.parquet"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(read_all(path(name)), docs);
    auto reader = open_document_reader(path(name), "text");
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    EXPECT_EQ((*reader)->num_documents(), 60);
  }
}

// Small row groups (skips pass over whole groups) and row groups longer than the reader's
// 1024-row batches (skips inside a group cross batches).
TEST_F(DocumentReaderTest, ParquetSkipAcrossRowGroupsEqualsReadingAndDropping) {
  std::vector<std::string> docs = make_documents(3000, 2);
  write_docs_json(docs);
  ASSERT_NO_FATAL_FAILURE(python(R"(
t = pa.table({'id': pa.array(range(len(docs)), pa.int64()), 'text': pa.array(docs, pa.string())})
pq.write_table(t.slice(0, 60), p('small_groups.parquet'), row_group_size=7)
pq.write_table(t, p('long_groups.parquet'), row_group_size=2500)
)"));
  expect_skips_match_reads(path("small_groups.parquet"), std::vector<std::string>(docs.begin(), docs.begin() + 60), 7);
  expect_skips_match_reads(path("long_groups.parquet"), docs, 8, /*max_skip=*/1500);
}

TEST_F(DocumentReaderTest, EmptyParquetFileHasNoDocuments) {
  ASSERT_NO_FATAL_FAILURE(python("pq.write_table(pa.table({'text': pa.array([], pa.string())}), p('empty.parquet'))"));
  EXPECT_TRUE(read_all(path("empty.parquet")).empty());
  auto reader = open_document_reader(path("empty.parquet"), "text");
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->num_documents(), 0);
  EXPECT_TRUE((*reader)->skip(0).ok());
  expect_error((*reader)->skip(1).message(), {path("empty.parquet"), "has 0 documents"});
}

TEST_F(DocumentReaderTest, JsonlPlainGzipZstdAndConcatenatedStreamsReadTheSameDocuments) {
  std::vector<std::string> docs = make_documents(60, 3);
  write_docs_json(docs);
  ASSERT_NO_FATAL_FAILURE(python(R"(
data = jsonl(docs)
half = jsonl(docs[:25]), jsonl(docs[25:])
open(p('docs.jsonl'), 'wb').write(data)
open(p('docs.json'), 'wb').write(data)  # JSON Lines under the .json name (overwrites docs.json)
open(p('docs.jsonl.gz'), 'wb').write(gzip.compress(data))
open(p('two_members.jsonl.gz'), 'wb').write(gzip.compress(half[0]) + gzip.compress(half[1]))
with pa.CompressedOutputStream(p('docs.jsonl.zst'), 'zstd') as out:
    out.write(data)
zstd = pa.Codec('zstd')
open(p('two_frames.json.zst'), 'wb').write(zstd.compress(half[0]).to_pybytes() + zstd.compress(half[1]).to_pybytes())
# CRLF line ends, blank lines between documents and at the start, no newline after the last.
lines = [l for l in data.decode('utf-8').split('\n') if l]
open(p('blank_lines.jsonl'), 'wb').write(('\r\n\n' + '\r\n  \n'.join(lines)).encode('utf-8'))
open(p('UPPER.JSONL.GZ'), 'wb').write(gzip.compress(data))
)"));
  for (const char* name : {"docs.jsonl", "docs.json", "docs.jsonl.gz", "two_members.jsonl.gz", "docs.jsonl.zst",
                           "two_frames.json.zst", "blank_lines.jsonl", "UPPER.JSONL.GZ"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(read_all(path(name)), docs);
    auto reader = open_document_reader(path(name), "text");
    ASSERT_TRUE(reader.ok());
    EXPECT_EQ((*reader)->num_documents(), -1);
  }
}

TEST_F(DocumentReaderTest, JsonlSkipEqualsReadingAndDropping) {
  std::vector<std::string> docs = make_documents(50, 4);
  write_docs_json(docs);
  ASSERT_NO_FATAL_FAILURE(python(R"(
data = jsonl(docs)
with pa.CompressedOutputStream(p('docs.jsonl.zst'), 'zstd') as out:
    out.write(data)
lines = [l for l in data.decode('utf-8').split('\n') if l]
open(p('blank_lines.jsonl.gz'), 'wb').write(gzip.compress(('\n\n'.join(lines) + '\n\n').encode('utf-8')))
)"));
  expect_skips_match_reads(path("docs.jsonl.zst"), docs, 11);
  expect_skips_match_reads(path("blank_lines.jsonl.gz"), docs, 12);
}

TEST_F(DocumentReaderTest, ReadsTheNamedColumnOrField) {
  ASSERT_NO_FATAL_FAILURE(python(R"(
pq.write_table(pa.table({'text': ['a', 'b'], 'content': ['x', 'y']}), p('two.parquet'))
open(p('two.jsonl'), 'w').write('{"text": "a", "content": "x"}\n{"content": "y", "text": "b", "nested": {"content": 1}}\n')
)"));
  EXPECT_EQ(read_all(path("two.parquet"), "content"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(read_all(path("two.jsonl"), "content"), (std::vector<std::string>{"x", "y"}));
}

// --- dataset listing ---

TEST_F(DocumentReaderTest, ListsHuggingFaceLayoutWithAndWithoutGlobs) {
  for (const char* name : {"README.md", "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
                           "data/validation-00000-of-00001.parquet", "data/.hidden.parquet",
                           ".cache/huggingface/download/data/train-00000-of-00002.parquet",
                           "en/c4-train.00000-of-01024.json.gz", "en/c4-train.00001-of-01024.json.gz",
                           "en/c4-validation.00000-of-00008.json.gz", "en/notes.txt", "en/old.parquet.gz"}) {
    fs::create_directories((dir_ / name).parent_path());
    write_file(name, "");
  }
  const std::string root = dir_.string();
  auto under = [&](std::vector<std::string> names) {
    for (auto& n : names) n = path(n);
    return names;
  };
  auto list = [&](const std::string& p, const std::string& data_dir, const std::string& files) {
    auto r = list_dataset_files(p, data_dir, files);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : std::vector<std::string>{};
  };
  EXPECT_EQ(list(root, "", ""),
            under({"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
                   "data/validation-00000-of-00001.parquet", "en/c4-train.00000-of-01024.json.gz",
                   "en/c4-train.00001-of-01024.json.gz", "en/c4-validation.00000-of-00008.json.gz"}));
  EXPECT_EQ(list(root, "", "data/train-*.parquet"),
            under({"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"}));
  EXPECT_EQ(list(root, "data", ""),
            under({"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
                   "data/validation-00000-of-00001.parquet"}));
  EXPECT_EQ(list(root, "en", "c4-train.*.json.gz"),
            under({"en/c4-train.00000-of-01024.json.gz", "en/c4-train.00001-of-01024.json.gz"}));
  EXPECT_EQ(list(root, "", "**/*validation*"),
            under({"data/validation-00000-of-00001.parquet", "en/c4-validation.00000-of-00008.json.gz"}));
  EXPECT_EQ(list(root, "", "data/*"),  // README-like and hidden files are never listed
            under({"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
                   "data/validation-00000-of-00001.parquet"}));
  EXPECT_EQ(list(path("data/train-00000-of-00002.parquet"), "", ""),
            under({"data/train-00000-of-00002.parquet"}));
  EXPECT_EQ(list(root + "/en/c4-train.*-of-01024.json.gz", "", ""),
            under({"en/c4-train.00000-of-01024.json.gz", "en/c4-train.00001-of-01024.json.gz"}));
}

TEST_F(DocumentReaderTest, ListingErrorsNameTheDirectoryTheGlobAndTheAcceptedFiles) {
  fs::create_directories(dir_ / "empty");
  write_file("empty_notes.txt", "");
  auto message = [](const Result<std::vector<std::string>>& r) { return r.ok() ? "" : r.status().message(); };
  expect_error(message(list_dataset_files(path("missing"), "", "")), {path("missing"), "does not exist"});
  expect_error(message(list_dataset_files(dir_.string(), "nope", "")), {path("nope"), "does not exist"});
  expect_error(message(list_dataset_files(path("empty"), "", "")),
               {path("empty"), "no dataset file", ".parquet", ".jsonl.zst"});
  expect_error(message(list_dataset_files(dir_.string(), "", "data/train-*.parquet")),
               {dir_.string(), "\"data/train-*.parquet\"", ".parquet, .jsonl"});
  expect_error(message(list_dataset_files(dir_.string() + "/*.parquet", "data", "")), {"glob", "data_dir"});
}

// --- bad input: one line naming the file ---

TEST_F(DocumentReaderTest, UnknownExtensionAndMissingFile) {
  write_file("docs.csv", "text\nhello\n");
  write_file("docs.parquet.gz", "");
  expect_error(first_error(path("docs.csv")), {path("docs.csv"), "unknown", ".parquet, .jsonl, .json", ".zst"});
  expect_error(first_error(path("docs.parquet.gz")), {path("docs.parquet.gz"), "unknown"});
  expect_error(first_error(path("nope.jsonl.zst")), {path("nope.jsonl.zst"), "no such file"});
  expect_error(first_error(path("nope.parquet")), {path("nope.parquet"), "no such file"});
}

TEST_F(DocumentReaderTest, ParquetColumnErrorsNameTheColumnsPresent) {
  ASSERT_NO_FATAL_FAILURE(python(R"(
t = pa.table({'body': ['a', 'b'], 'id': pa.array([1, 2], pa.int64()), 'raw': pa.array([b'x', b'y'], pa.binary())})
pq.write_table(t, p('docs.parquet'))
)"));
  const std::string file = path("docs.parquet");
  expect_error(first_error(file, "text"), {file, "no column \"text\"", "body, id, raw"});
  expect_error(first_error(file, "id"), {file, "column \"id\" is int64, not a string column"});
  expect_error(first_error(file, "raw"), {file, "column \"raw\" is binary, not a string column"});
}

TEST_F(DocumentReaderTest, TruncatedAndCorruptParquet) {
  std::vector<std::string> docs;
  for (int i = 0; i < 50; ++i) docs.push_back("document " + std::to_string(i) + " MARK" + std::to_string(i) + "END");
  write_docs_json(docs);
  ASSERT_NO_FATAL_FAILURE(python(R"(
t = pa.table({'text': pa.array(docs, pa.string())})
pq.write_table(t, p('cut.parquet'), row_group_size=10)
pq.write_table(t, p('flipped.parquet'), row_group_size=10, compression='none', write_page_checksum=True,
               use_dictionary=False)
)"));
  const std::string cut = path("cut.parquet");
  fs::resize_file(cut, fs::file_size(cut) / 2);
  expect_error(first_error(cut), {cut, "Parquet", "corrupt or truncated"});
  // A flipped byte inside row group 2's page: the page checksum catches it at that row group.
  const std::string flipped = path("flipped.parquet");
  std::string bytes = testing::read_text_file(flipped);
  size_t at = bytes.find("MARK25END");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 4] ^= 0x01;
  write_file("flipped.parquet", bytes);
  auto reader = open_document_reader(flipped, "text");
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  std::string text;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*reader)->next(&text).ok()) << "row " << i;
  auto more = (*reader)->next(&text);
  ASSERT_FALSE(more.ok());
  expect_error(more.status().message(), {flipped, "row group 2", "rows 20 to 29", "\"text\""});
}

TEST_F(DocumentReaderTest, TruncatedOrCorruptGzipAndZstd) {
  std::vector<std::string> docs = make_documents(30, 5);
  write_docs_json(docs);
  ASSERT_NO_FATAL_FAILURE(python(R"(
data = jsonl(docs)
gz = gzip.compress(data)
open(p('cut.jsonl.gz'), 'wb').write(gz[:len(gz) // 2])
crc = bytearray(gz); crc[-6] ^= 0xff  # the CRC-32 in the member's trailer
open(p('crc.jsonl.gz'), 'wb').write(bytes(crc))
open(p('text.jsonl.gz'), 'wb').write(data)  # not gzip at all
open(p('empty.jsonl.gz'), 'wb').write(b'')
zst = pa.Codec('zstd').compress(data).to_pybytes()
open(p('cut.jsonl.zst'), 'wb').write(zst[:len(zst) - 100])
open(p('magic.jsonl.zst'), 'wb').write(b'\x00\x00\x00\x00' + zst[4:])
open(p('empty.jsonl.zst'), 'wb').write(b'')
)"));
  expect_error(first_error(path("cut.jsonl.gz")), {path("cut.jsonl.gz"), "truncated gzip"});
  expect_error(first_error(path("crc.jsonl.gz")), {path("crc.jsonl.gz"), "corrupt gzip", "incorrect data check"});
  expect_error(first_error(path("text.jsonl.gz")), {path("text.jsonl.gz"), "corrupt gzip", "byte"});
  expect_error(first_error(path("empty.jsonl.gz")), {path("empty.jsonl.gz"), "truncated gzip"});
  expect_error(first_error(path("cut.jsonl.zst")), {path("cut.jsonl.zst"), "truncated zstd"});
  expect_error(first_error(path("magic.jsonl.zst")), {path("magic.jsonl.zst"), "corrupt zstd"});
  expect_error(first_error(path("empty.jsonl.zst")), {path("empty.jsonl.zst"), "truncated zstd"});
}

TEST_F(DocumentReaderTest, BadJsonLinesAreNamedByLineNumber) {
  write_file("syntax.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n\n{not json}\n");
  write_file("array.jsonl", "{\"text\": \"a\"}\n[1, 2]\n");
  write_file("missing.jsonl", "{\"body\": \"a\", \"id\": 1}\n");
  write_file("number.jsonl", "{\"text\": \"a\"}\r\n{\"text\": 5}\r\n");
  write_file("null.jsonl", "{\"text\": null}\n");
  write_file("cut.jsonl", "{\"text\": \"a\"}\n{\"text\": \"unterminated");
  write_file("array.json", "[\n  {\"text\": \"a\"}\n]\n");
  const auto f = [&](const char* name) { return path(name); };
  expect_error(first_error(f("syntax.jsonl")), {f("syntax.jsonl"), "line 4", "not valid JSON"});
  expect_error(first_error(f("array.jsonl")), {f("array.jsonl"), "line 2", "expected a JSON object", "an array"});
  expect_error(first_error(f("missing.jsonl")), {f("missing.jsonl"), "line 1", "no field \"text\"", "body, id"});
  expect_error(first_error(f("number.jsonl")), {f("number.jsonl"), "line 2", "field \"text\" is a number"});
  expect_error(first_error(f("null.jsonl")), {f("null.jsonl"), "line 1", "is null, not a string"});
  expect_error(first_error(f("cut.jsonl")), {f("cut.jsonl"), "line 2", "not valid JSON"});
  expect_error(first_error(f("array.json")), {f("array.json"), "line 1", "JSON Lines", "not a JSON array"});
}

}  // namespace
}  // namespace kiln::data
