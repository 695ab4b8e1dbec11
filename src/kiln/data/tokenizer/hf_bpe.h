// Byte-level BPE as Hugging Face's `tokenizers` defines it (its models/bpe): a pre-token
// starts as its single bytes (the byte-level vocabulary has one token per byte); of the
// adjacent pairs the merge list holds, the pair with the lowest merge rank (its index in
// `merges`) is merged, the leftmost on ties, until no adjacent pair is in the list.
//
// The rank belongs to the pair of tokens, not to the merged bytes as in tiktoken (bpe.h): a
// token that two splits reach ("a"+"bc" and "ab"+"c") has one rank per listed split, and a
// split the list lacks never merges, so the two definitions differ on such pieces; this one
// gives `tokenizers`' ids. With ignore_merges (Llama 3's and transformers' tiktoken
// converter's setting) a pre-token that is itself in the vocabulary is that token.
//
// Tokens are held as bytes (the tokenizer.json strings decoded through the GPT-2 byte map):
// the text is never mapped to that alphabet, and the two spellings correspond one to one.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kiln/data/tokenizer/bpe.h"

namespace kiln::data::hf {

class BpeModel {
 public:
  BpeModel();
  // A vocabulary entry BPE can reach (its text is in the byte alphabet); false when the bytes
  // or the id are already present.
  bool add_token(std::string_view bytes, int32_t id);
  // Merge number `rank` of `left` and `right` into `merged`; a pair listed again takes the
  // later rank (as `tokenizers`' merge map does).
  void add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank);
  void set_ignore_merges(bool on) { ignore_merges_ = on; }
  // After all tokens and merges, for each token: whether merging its own bytes gives the token
  // back (almost always). encode_piece then takes such a piece whole, with one lookup, as
  // tiktoken does; the rest are merged, so the ids stay `tokenizers`' exactly.
  void note_reachable(std::string_view bytes, int32_t id);
  // The first byte without a token, -1 when every byte has one (required before encoding).
  int missing_byte() const;
  size_t num_merges() const { return pairs_.size(); }

  // Appends the ids of one pre-token. Pieces that need merging are kept in a small
  // per-thread cache, so a recurring word is merged once per thread. Thread-safe.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // The two merge strategies (a rescan for short pieces, a heap for long ones), exposed so
  // tests can check that they agree.
  void merge_linear(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_heap(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  // (left id, right id) -> (rank, merged id), open addressing with the pair as one 64-bit key.
  class PairTable {
   public:
    struct Merge {
      uint32_t rank;
      int32_t merged;
    };
    static constexpr Merge kNoMerge{0xFFFFFFFFu, -1};
    void insert_or_assign(uint32_t left, uint32_t right, Merge merge);
    Merge find(uint32_t left, uint32_t right) const;
    size_t size() const { return size_; }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    struct Slot {
      uint64_t key = kEmpty;
      Merge merge = kNoMerge;
    };
    void grow();
    std::vector<Slot> slots_;
    size_t size_ = 0;
  };

  int32_t byte_id(unsigned char b) const { return byte_ids_[b]; }
  PairTable::Merge pair(int32_t left, int32_t right) const {
    return pairs_.find(static_cast<uint32_t>(left), static_cast<uint32_t>(right));
  }

  bpe::RankTable vocab_;  // bytes -> id (RankTable's "rank" is the token id here)
  int32_t byte_ids_[256];
  PairTable pairs_;
  std::vector<uint8_t> reachable_;  // by id: note_reachable found the token merges to itself
  bool ignore_merges_ = false;
};

}  // namespace kiln::data::hf
