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

// The chunk of a layer's expert dispatch a value belongs to (the model's num_moe_chunks:
// scope "chunks.K" inside a layer): "layers.3.mlp.chunks.2" for
// "layers.3.mlp.chunks.2.dispatched.remat"; empty for a value of no chunk.
inline std::string_view chunk_unit(std::string_view name) {
  constexpr std::string_view kChunks = "chunks.";
  for (size_t at = name.find(kChunks); at != std::string_view::npos; at = name.find(kChunks, at + 1)) {
    if (at != 0 && name[at - 1] != '.') continue;
    size_t end = at + kChunks.size();
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end > at + kChunks.size() && (end == name.size() || name[end] == '.')) return name.substr(0, end);
  }
  return {};
}

inline bool is_loss_tile_name(std::string_view name) {
  constexpr std::string_view kVocabTiles = "vocab_tiles.";
  const size_t at = name.find(kVocabTiles);
  return at != std::string_view::npos && (at == 0 || name[at - 1] == '.');
}

}  // namespace kiln::passes
