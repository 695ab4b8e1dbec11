#define PCRE2_CODE_UNIT_WIDTH 8
#include "kiln/data/tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <atomic>

#include "kiln/base/check.h"

namespace kiln::data {

namespace {

// Per-thread match state: match data sized for the pattern and a JIT stack that can grow
// to 16 MiB (long whitespace runs with a lookahead recurse deeper than the default 32 KiB).
struct MatchState {
  uint64_t owner = 0;  // Pretokenizer::id_ (an address could be reused by a later pattern)
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~MatchState() { reset(); }
  void reset() {
    if (data) pcre2_match_data_free(data);
    if (context) pcre2_match_context_free(context);
    if (stack) pcre2_jit_stack_free(stack);
    data = nullptr, context = nullptr, stack = nullptr, owner = 0;
  }
};

MatchState& match_state(uint64_t owner, pcre2_code* code, bool jit) {
  thread_local MatchState state;
  if (state.owner != owner) {
    state.reset();
    state.owner = owner;
    state.data = pcre2_match_data_create_from_pattern(code, nullptr);
    state.context = pcre2_match_context_create(nullptr);
    if (jit) {
      state.stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
      pcre2_jit_stack_assign(state.context, nullptr, state.stack);
    }
  }
  return state;
}

}  // namespace

Result<std::unique_ptr<Pretokenizer>> Pretokenizer::compile(const std::string& pattern) {
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
  std::unique_ptr<Pretokenizer> p(new Pretokenizer());
  p->code_ = code;
  p->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  static std::atomic<uint64_t> next_id{1};
  p->id_ = next_id.fetch_add(1);
  return p;
}

Pretokenizer::~Pretokenizer() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void Pretokenizer::split(std::string_view text, const std::function<void(std::string_view)>& piece) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchState& st = match_state(id_, code, jit_);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, st.data, st.context)
                  : pcre2_match(code, subject, text.size(), pos, 0, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      piece(text.substr(pos));  // trailing bytes no match covers (invalid UTF-8)
      return;
    }
    // rc 0: more groups than the match data holds; the whole match (ovector[0..1]) is there.
    KILN_CHECK(rc >= 0) << "PCRE2 match failed with error " << rc;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t begin = ov[0], end = ov[1];
    if (begin > pos) piece(text.substr(pos, begin - pos));  // skipped invalid bytes
    if (end == begin) {
      // The split patterns never match empty text; step one byte so a custom one cannot loop.
      piece(text.substr(begin, 1));
      pos = begin + 1;
      continue;
    }
    piece(text.substr(begin, end - begin));
    pos = end;
  }
}

}  // namespace kiln::data
