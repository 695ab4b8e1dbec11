// The names by which later passes and the scheduler recognize recomputation: RematPass names
// its clones "<name>.remat", RegatherPass its backward gathers "<name>.regather"; a loss tile
// (the model's num_vocab_tiling) is the scope "vocab_tiles.N", also under an outer scope
// ("loss.vocab_tiles.3.logits").
#pragma once

#include <string_view>

namespace kiln::passes {

inline bool is_recomputation_name(std::string_view name) {
  return name.ends_with(".remat") || name.ends_with(".regather");
}

inline bool is_loss_tile_name(std::string_view name) {
  constexpr std::string_view kVocabTiles = "vocab_tiles.";
  const size_t at = name.find(kVocabTiles);
  return at != std::string_view::npos && (at == 0 || name[at - 1] == '.');
}

}  // namespace kiln::passes
