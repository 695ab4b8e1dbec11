// kiln tokenize: text -> token shards, and a quick look at a tokenizer.
//   kiln tokenize --output DIR [tokenizer keys] [--text_field F] [--threads N] FILE...
//                                                          shards + manifest.json (resumable)
//   kiln tokenize --ids [tokenizer keys]                   stdin text -> ids, one line per line
//   kiln tokenize --ids --decode [tokenizer keys]          stdin ids -> text
//   kiln tokenize --train_sentencepiece PREFIX --vocab_size N FILE...   PREFIX.model, .vocab
// Tokenizer keys: --tokenizer_type / --tokenizer_path, or MaxText-style key=value
// arguments (tokenizer_type=tiktoken tokenizer_path=o200k_harmony). Documents in a text file
// are paragraphs separated by blank lines or "%" lines; in a .jsonl file, each line's
// --text_field string (docs/data.md).
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.h"
#include "kiln/data/corpus.h"
#include "kiln/data/tokenizer.h"
#include "kiln/data/tokenizer/tiktoken.h"
#include "kiln/data/tokenizer/tokenize_corpus.h"

namespace kiln::app {

namespace {

struct Options {
  std::vector<std::string> inputs;
  std::string output, tokenizer_type = "bytes", tokenizer_path, tokenizer_dir, train_sentencepiece, allowed_special;
  std::string text_field = "text";
  int64_t chunk_bytes = 64ll << 20, vocab_size = 8000;
  int threads = 0;
  bool ids = false, decode = false;
};

// Moves key=value arguments for the tokenizer out of the file list.
Status take_keys(Options& o) {
  std::vector<std::string> files;
  for (const std::string& a : o.inputs) {
    size_t eq = a.find('=');
    std::string key = eq == std::string::npos ? "" : a.substr(0, eq);
    if (key == "tokenizer_type") {
      o.tokenizer_type = a.substr(eq + 1);
    } else if (key == "tokenizer_path") {
      o.tokenizer_path = a.substr(eq + 1);
    } else if (key == "tokenizer_dir") {
      o.tokenizer_dir = a.substr(eq + 1);
    } else if (!key.empty() && key.find('/') == std::string::npos && key.find('.') == std::string::npos) {
      return invalid_argument("{}: kiln tokenize takes the keys tokenizer_type, tokenizer_path and tokenizer_dir (and input files)", a);
    } else {
      files.push_back(a);
    }
  }
  o.inputs = files;
  return ok_status();
}

Result<std::unique_ptr<data::Tokenizer>> make(const Options& o) {
  if (o.allowed_special.empty()) return data::make_tokenizer(o.tokenizer_type, o.tokenizer_path, o.tokenizer_dir);
  if (o.tokenizer_type != "tiktoken") {
    return invalid_argument("--allowed_special applies to tokenizer_type=tiktoken, not {}", o.tokenizer_type);
  }
  data::TiktokenTokenizer::Options options;
  options.directory = o.tokenizer_dir;
  std::istringstream list(o.allowed_special);
  for (std::string s; std::getline(list, s, ',');) {
    if (!s.empty()) options.allowed_special.push_back(s);
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<data::TiktokenTokenizer> t, data::TiktokenTokenizer::load(o.tokenizer_path, options));
  return std::unique_ptr<data::Tokenizer>(std::move(t));
}

// --ids / --decode: one output line per input line.
int ids_mode(const Options& o, const data::Tokenizer& tok) {
  std::string line;
  int64_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (!o.decode) {
      fmt::print("{}\n", fmt::join(tok.encode(line), " "));
      continue;
    }
    std::vector<int32_t> ids;
    std::istringstream in(line);
    std::string word;
    while (in >> word) {
      try {
        size_t used = 0;
        long long id = std::stoll(word, &used);
        if (used != word.size() || id < INT32_MIN || id > INT32_MAX) throw std::invalid_argument(word);
        ids.push_back(static_cast<int32_t>(id));
      } catch (const std::exception&) {
        return report_error(invalid_argument("stdin:{}: \"{}\" is not a token id", n, word));
      }
    }
    Result<std::string> text = tok.decode(ids);
    if (!text.ok()) return report_error(text.status().with_context(fmt::format("stdin:{}", n)));
    fmt::print("{}\n", *text);
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

std::function<int()> add_tokenize_command(CLI::App& cmd) {
  auto opts = std::make_shared<Options>();
  cmd.add_option("inputs", opts->inputs,
                 "Text files (.jsonl: one JSON object per line; else paragraphs) and tokenizer_type=/tokenizer_path=/tokenizer_dir= keys")
      ->type_name("FILE...");
  cmd.add_option("-o,--output", opts->output, "Directory for shard_NNNNN.bin and manifest.json");
  cmd.add_option("--tokenizer_type", opts->tokenizer_type,
                 "bytes (UTF-8 bytes + BOS/EOS, vocab 258), sentencepiece (--tokenizer_path MODEL), tiktoken or "
                 "huggingface (--tokenizer_path tokenizer.json or its folder)");
  cmd.add_option("--tokenizer_path", opts->tokenizer_path,
                 "SentencePiece .model file, or a tiktoken encoding: o200k_harmony, o200k_base, cl100k_base, "
                 "p50k_base, r50k_base, gpt2, a .tiktoken file or an encoder .json, or a Hugging Face "
                 "tokenizer.json (or the folder holding it)");
  cmd.add_option("--tokenizer_dir", opts->tokenizer_dir,
                 "tiktoken: the folder of OpenAI's .tiktoken files that encoding names are looked up in "
                 "(default $KILN_TOKENIZER_DIR, else ~/.cache/kiln/tiktoken)");
  cmd.add_option("--allowed_special", opts->allowed_special,
                 "tiktoken: special tokens recognised in the text (comma-separated, or all); default none: their "
                 "text is encoded as ordinary text");
  cmd.add_option("--text_field", opts->text_field, "JSONL: the field that holds a document's text");
  cmd.add_option("--chunk_bytes", opts->chunk_bytes,
                 "Input bytes per shard (a unit of parallel work, cut at a document boundary)");
  cmd.add_option("--threads", opts->threads, "Worker threads (0: one per core)");
  cmd.add_option("--train_sentencepiece", opts->train_sentencepiece,
                 "Train a SentencePiece unigram model on FILE... and write PREFIX.model and PREFIX.vocab")
      ->type_name("PREFIX");
  cmd.add_option("--vocab_size", opts->vocab_size, "With --train_sentencepiece: the vocabulary size");
  cmd.add_flag("--ids", opts->ids, "Read text on stdin and print its token ids, one line per input line");
  cmd.add_flag("--decode", opts->decode, "With --ids: read ids on stdin and print the text");
  return [opts]() -> int {
    Status keys = take_keys(*opts);
    if (!keys.ok()) return report_error(keys);
    if (!opts->train_sentencepiece.empty()) {
      if (opts->inputs.empty()) return report_error(invalid_argument("--train_sentencepiece needs input files"));
      Status st = data::train_sentencepiece(opts->inputs, opts->train_sentencepiece, opts->vocab_size);
      if (!st.ok()) return report_error(st);
      fmt::print("wrote {}.model and {}.vocab (SentencePiece unigram, vocab_size {})\n", opts->train_sentencepiece,
                 opts->train_sentencepiece, opts->vocab_size);
      return kExitOk;
    }
    Result<std::unique_ptr<data::Tokenizer>> tok = make(*opts);
    if (!tok.ok()) return report_error(tok.status());
    if (opts->ids || opts->decode) return ids_mode(*opts, **tok);
    if (opts->output.empty() || opts->inputs.empty()) {
      return report_error(invalid_argument("kiln tokenize needs --output DIR and input files (or --ids)"));
    }
    data::TokenizeCorpusOptions options;
    options.output_dir = opts->output;
    options.text_field = opts->text_field;
    options.chunk_bytes = opts->chunk_bytes;
    options.threads = opts->threads;
    Result<data::TokenizeCorpusReport> report = data::tokenize_corpus(opts->inputs, **tok, options);
    if (!report.ok()) return report_error(report.status());
    if (!report->restart_reason.empty()) fmt::print("tokenized everything again: {}\n", report->restart_reason);
    fmt::print("tokenized {} documents, {} tokens ({}) into {} shard(s), {} reused from an earlier run; manifest: {}\n",
               report->documents, report->tokens, (*tok)->name(), report->shards, report->reused_shards,
               report->manifest_path);
    return kExitOk;
  };
}

}  // namespace kiln::app
