#define PCRE2_CODE_UNIT_WIDTH 8
#include "kiln/data/tokenizer/hf_pretokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/check.h"

namespace kiln::data::hf {

namespace {

// Compiled as pretokenizer.cc compiles tiktoken's patterns.
Result<pcre2_code*> compile_pcre2(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return invalid_argument("split pattern does not compile at offset {}: {}", offset,
                            reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: pcre2_match runs the JIT code when there is one
  return code;
}

struct Span {
  size_t begin, end;
  bool match;
};

// Per-thread match state shared by all patterns here (Pretokenizer keeps one per pattern and
// thread, and would rebuild it at every switch between the patterns of a Sequence): match
// data for the whole match only, and a JIT stack that can grow to 16 MiB, as pretokenizer.cc's.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

// `tokenizers`' find_matches over the Oniguruma iterator: matches and the text between them,
// tiling `text`; an empty match right after the previous match is skipped (the iterator then
// steps one character), any other empty match is a (zero-length) match.
void find_matches(pcre2_code* code, std::string_view text, std::vector<Span>& spans) {
  thread_local MatchState state;
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t last_end = 0, prev = 0;
  size_t last_match_end = std::string_view::npos;
  while (last_end <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), last_end, 0, state.data, state.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // deeper than 16 MiB: the interpreter, on the heap
      rc = pcre2_match(code, subject, text.size(), last_end, PCRE2_NO_JIT, state.data, state.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    // rc 0: the pattern has groups the match data has no room for; the whole match is there.
    KILN_CHECK(rc >= 0) << "PCRE2 match failed with error " << rc;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ov[0], end = ov[1];
    if (begin == end && last_match_end == end) {
      if (last_end == text.size()) break;
      ++last_end;  // one character: past its continuation bytes too
      while (last_end < text.size() && (static_cast<unsigned char>(text[last_end]) & 0xC0) == 0x80) ++last_end;
      continue;
    }
    last_end = last_match_end = end;
    if (prev != begin) spans.push_back({prev, begin, false});
    spans.push_back({begin, end, true});
    prev = end;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), false});
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::compile(const std::vector<PreTokenizerStep>& steps) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  size_t patterns = 0;
  for (const PreTokenizerStep& spec : steps) {
    patterns += spec.kind == PreTokenizerStep::Kind::kSplit || spec.use_regex;
  }
  for (const PreTokenizerStep& spec : steps) {
    Step step{spec, nullptr, nullptr};
    if (spec.kind == PreTokenizerStep::Kind::kByteLevel && !spec.use_regex) {
      p->steps_.push_back(std::move(step));
      continue;
    }
    const std::string& pattern = spec.kind == PreTokenizerStep::Kind::kByteLevel ? kGpt2Pattern : spec.pattern;
    KILN_ASSIGN_OR_RETURN(pcre2_code * code, compile_pcre2(pattern));
    // The usual file (one pattern, Isolated) splits through tiktoken's Pretokenizer. Not a
    // pattern that can match empty text (only find_matches treats that as `tokenizers`
    // does), and not one of several (Pretokenizer's per-thread state serves one pattern).
    uint32_t match_empty = 1;
    pcre2_pattern_info(code, PCRE2_INFO_MATCHEMPTY, &match_empty);
    const bool isolated = spec.kind == PreTokenizerStep::Kind::kByteLevel || spec.behavior == SplitBehavior::kIsolated;
    if (isolated && match_empty == 0 && patterns == 1) {
      pcre2_code_free(code);
      KILN_ASSIGN_OR_RETURN(step.isolated, Pretokenizer::compile(pattern));
    } else {
      step.flagged = code;
    }
    p->steps_.push_back(std::move(step));
  }
  return p;
}

PreTokenizer::~PreTokenizer() {
  for (Step& s : steps_) {
    if (s.flagged) pcre2_code_free(static_cast<pcre2_code*>(s.flagged));
  }
}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& piece) const {
  run(0, text, piece);
}

void PreTokenizer::run(size_t index, std::string_view text, const std::function<void(std::string_view)>& piece) const {
  if (text.empty()) return;
  if (index == steps_.size()) {
    piece(text);
    return;
  }
  const Step& step = steps_[index];
  auto next = [&](std::string_view part) { run(index + 1, part, piece); };
  if (step.spec.kind == PreTokenizerStep::Kind::kByteLevel) {
    std::string prefixed;
    if (step.spec.add_prefix_space && text[0] != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(text);
      text = prefixed;
    }
    if (step.isolated) {
      step.isolated->split(text, next);
    } else if (step.flagged) {
      split_flagged(step, text, next);  // ByteLevel's use_regex: Isolated
    } else {
      next(text);
    }
  } else if (step.isolated) {
    step.isolated->split(text, next);
  } else {
    split_flagged(step, text, next);
  }
}

void PreTokenizer::split_flagged(const Step& step, std::string_view text,
                                 const std::function<void(std::string_view)>& piece) const {
  std::vector<Span> spans;
  find_matches(static_cast<pcre2_code*>(step.flagged), text, spans);
  if (step.spec.invert) {
    for (Span& s : spans) s.match = !s.match;
  }
  // NormalizedString::split: which spans stay, and which merge with a neighbour.
  std::vector<Span> out;
  out.reserve(spans.size());
  switch (step.spec.behavior) {
    case SplitBehavior::kIsolated:
      out = spans;
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.match) out.push_back(s);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous = false;
      for (const Span& s : spans) {
        if (s.match == previous && !out.empty()) out.back().end = s.end;
        else out.push_back(s);
        previous = s.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous = false;
      for (const Span& s : spans) {
        if (s.match && !previous && !out.empty()) out.back().end = s.end;
        else out.push_back(s);
        previous = s.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !previous && !out.empty()) out.back().begin = s.begin;
        else out.push_back(s);
        previous = s.match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  for (const Span& s : out) piece(text.substr(s.begin, s.end - s.begin));
}

}  // namespace kiln::data::hf
