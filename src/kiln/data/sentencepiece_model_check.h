// Checks a SentencePiece model's precompiled normalization maps before the library uses
// them. libsentencepiece (0.1.97, Debian 12) trusts the map's trie and its offsets into the
// normalized strings: a crafted model makes Encode read outside its buffers (found by
// tests/fuzz's sentencepiece target; docs/fuzzing.md). The map is
//   uint32 trie_bytes | trie (darts-clone double array, uint32 units) | normalized strings
// and every trie transition and every leaf's offset must stay inside it.
#pragma once

#include <string>
#include <string_view>

#include "kiln/base/status.h"

namespace kiln::data {

// `model` is the model file's bytes (a serialized ModelProto). Finds every
// normalizer_spec / denormalizer_spec precompiled_charsmap and checks it; errors name
// `path` and what is wrong. Anything else in the model is left to the library.
Status check_sentencepiece_charsmaps(std::string_view model, const std::string& path);

}  // namespace kiln::data
