// kiln tokenize: text -> token shards, and a quick look at a tokenizer.
//   kiln tokenize --output DIR [--tokenizer_type=bytes] FILE...   shards + manifest.json
//   kiln tokenize --ids [--tokenizer_type=bytes]                    stdin text -> ids per line
//   kiln tokenize --ids --decode                                    stdin ids -> text per line
//   kiln tokenize --train_sentencepiece PREFIX --vocab_size N FILE... PREFIX.model, .vocab
// Documents in a text file: paragraphs separated by blank lines or "%" lines; in a .jsonl
// file, each line's "text" field (docs/data.md).
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

namespace kiln::app {

std::function<int()> add_tokenize_command(CLI::App& cmd) {
  struct Options {
    std::vector<std::string> inputs;
    std::string output, tokenizer_type = "bytes", tokenizer_path, train_sentencepiece;
    int64_t shard_tokens = 1 << 24, vocab_size = 8000;
    bool ids = false, decode = false;
  };
  auto opts = std::make_shared<Options>();
  cmd.add_option("inputs", opts->inputs, "Text files (.jsonl: one {\"text\": ...} per line; else paragraphs)")
      ->type_name("FILE...");
  cmd.add_option("-o,--output", opts->output, "Directory for shard_NNNNN.bin and manifest.json");
  cmd.add_option("--tokenizer_type", opts->tokenizer_type,
                 "bytes (UTF-8 bytes + BOS/EOS, vocab 258) or sentencepiece (needs --tokenizer_path)");
  cmd.add_option("--tokenizer_path", opts->tokenizer_path, "Tokenizer model file (SentencePiece .model)");
  cmd.add_option("--train_sentencepiece", opts->train_sentencepiece,
                 "Train a SentencePiece unigram model on FILE... and write PREFIX.model and PREFIX.vocab")
      ->type_name("PREFIX");
  cmd.add_option("--vocab_size", opts->vocab_size, "With --train_sentencepiece: the vocabulary size");
  cmd.add_option("--shard_tokens", opts->shard_tokens, "Start a new shard after this many tokens");
  cmd.add_flag("--ids", opts->ids, "Read text on stdin and print its token ids, one line per input line");
  cmd.add_flag("--decode", opts->decode, "With --ids: read ids on stdin and print the text");
  return [opts]() -> int {
    if (!opts->train_sentencepiece.empty()) {
      if (opts->inputs.empty()) return report_error(invalid_argument("--train_sentencepiece needs input files"));
      Status st = data::train_sentencepiece(opts->inputs, opts->train_sentencepiece, opts->vocab_size);
      if (!st.ok()) return report_error(st);
      fmt::print("wrote {}.model and {}.vocab (SentencePiece unigram, vocab_size {})\n", opts->train_sentencepiece,
                 opts->train_sentencepiece, opts->vocab_size);
      return kExitOk;
    }
    Result<std::unique_ptr<data::Tokenizer>> tok = data::make_tokenizer(opts->tokenizer_type, opts->tokenizer_path);
    if (!tok.ok()) return report_error(tok.status());
    if (opts->ids || opts->decode) {
      std::string line;
      int64_t n = 0;
      while (std::getline(std::cin, line)) {
        ++n;
        if (!opts->decode) {
          fmt::print("{}\n", fmt::join((*tok)->encode(line), " "));
          continue;
        }
        std::vector<int32_t> ids;
        std::istringstream in(line);
        std::string word;
        while (in >> word) {
          try {
            size_t used = 0;
            long long id = std::stoll(word, &used);
            if (used != word.size()) throw std::invalid_argument(word);
            ids.push_back(static_cast<int32_t>(id));
          } catch (const std::exception&) {
            return report_error(invalid_argument("stdin:{}: \"{}\" is not a token id", n, word));
          }
        }
        Result<std::string> text = (*tok)->decode(ids);
        if (!text.ok()) return report_error(text.status().with_context(fmt::format("stdin:{}", n)));
        fmt::print("{}\n", *text);
      }
      return kExitOk;
    }
    if (opts->output.empty() || opts->inputs.empty()) {
      return report_error(invalid_argument("kiln tokenize needs --output DIR and input files (or --ids)"));
    }
    data::TokenizeOptions options{opts->output, opts->shard_tokens};
    Result<data::TokenizeReport> report = data::tokenize_files(opts->inputs, **tok, options);
    if (!report.ok()) return report_error(report.status());
    fmt::print("tokenized {} documents, {} tokens ({}) into {} shard(s); manifest: {}\n", report->documents,
               report->tokens, (*tok)->name(), report->shards, report->manifest_path);
    return kExitOk;
  };
}

}  // namespace kiln::app
