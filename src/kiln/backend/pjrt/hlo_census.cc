#include "kiln/backend/pjrt/hlo_census.h"

#include <functional>
#include <set>
#include <unordered_map>
#include <vector>

namespace kiln::backend::pjrt {

namespace {

// Protobuf wire format: each field is a varint key (field << 3 | wire type) and a value:
// 0 varint, 1 fixed 64 bits, 2 length-delimited bytes, 5 fixed 32 bits.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return pos_ >= bytes_.size(); }

  // The next field: its number and wire type, then its value through the accessors below.
  Status next(int& field, int& type) {
    KILN_ASSIGN_OR_RETURN(uint64_t key, varint());
    field = static_cast<int>(key >> 3);
    type = static_cast<int>(key & 7);
    return ok_status();
  }
  Result<uint64_t> varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) return invalid_argument("hlo module: truncated varint at byte {}", pos_);
      const auto byte = static_cast<uint8_t>(bytes_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return invalid_argument("hlo module: varint longer than 10 bytes at byte {}", pos_);
  }
  Result<std::string_view> bytes() {
    KILN_ASSIGN_OR_RETURN(uint64_t size, varint());
    if (size > bytes_.size() - pos_) return invalid_argument("hlo module: a field of {} bytes runs past the end", size);
    std::string_view out = bytes_.substr(pos_, size);
    pos_ += size;
    return out;
  }
  Status skip(int type) {
    switch (type) {
      case 0: return varint().status();
      case 1: return advance(8);
      case 2: return bytes().status();
      case 5: return advance(4);
      default: return invalid_argument("hlo module: wire type {} at byte {} (not a protobuf message)", type, pos_);
    }
  }

 private:
  Status advance(size_t n) {
    if (n > bytes_.size() - pos_) return invalid_argument("hlo module: truncated at byte {}", pos_);
    pos_ += n;
    return ok_status();
  }
  std::string_view bytes_;
  size_t pos_ = 0;
};

struct Instruction {
  std::string opcode, fusion_kind, custom_call_target;
  std::vector<int64_t> called;
};

struct Computation {
  int64_t id = -1;
  std::string name;
  bool is_fusion = false;
  std::vector<Instruction> instructions;
};

Result<Instruction> read_instruction(std::string_view bytes) {
  Instruction instr;
  WireReader r(bytes);
  while (!r.done()) {
    int field = 0, type = 0;
    KILN_RETURN_IF_ERROR(r.next(field, type));
    if (type == 2 && (field == 2 || field == 11 || field == 28)) {
      KILN_ASSIGN_OR_RETURN(std::string_view s, r.bytes());
      (field == 2 ? instr.opcode : field == 11 ? instr.fusion_kind : instr.custom_call_target) = std::string(s);
    } else if (field == 38 && type == 2) {  // packed repeated int64
      KILN_ASSIGN_OR_RETURN(std::string_view packed, r.bytes());
      WireReader p(packed);
      while (!p.done()) {
        KILN_ASSIGN_OR_RETURN(uint64_t id, p.varint());
        instr.called.push_back(static_cast<int64_t>(id));
      }
    } else if (field == 38 && type == 0) {
      KILN_ASSIGN_OR_RETURN(uint64_t id, r.varint());
      instr.called.push_back(static_cast<int64_t>(id));
    } else {
      KILN_RETURN_IF_ERROR(r.skip(type));
    }
  }
  return instr;
}

Result<Computation> read_computation(std::string_view bytes) {
  Computation c;
  WireReader r(bytes);
  while (!r.done()) {
    int field = 0, type = 0;
    KILN_RETURN_IF_ERROR(r.next(field, type));
    if (field == 1 && type == 2) {
      KILN_ASSIGN_OR_RETURN(std::string_view s, r.bytes());
      c.name = std::string(s);
    } else if (field == 2 && type == 2) {
      KILN_ASSIGN_OR_RETURN(std::string_view s, r.bytes());
      KILN_ASSIGN_OR_RETURN(Instruction instr, read_instruction(s));
      c.instructions.push_back(std::move(instr));
    } else if (field == 5 && type == 0) {
      KILN_ASSIGN_OR_RETURN(uint64_t id, r.varint());
      c.id = static_cast<int64_t>(id);
    } else if (field == 7 && type == 0) {
      KILN_ASSIGN_OR_RETURN(uint64_t flag, r.varint());
      c.is_fusion = flag != 0;
    } else {
      KILN_RETURN_IF_ERROR(r.skip(type));
    }
  }
  return c;
}

// XLA's collective opcodes; "-start" forms are the async halves ("-done" is not counted).
const std::set<std::string, std::less<>>& collective_opcodes() {
  static const std::set<std::string, std::less<>> kOps = {"all-gather",   "reduce-scatter",    "all-reduce",
                                                          "all-to-all",   "ragged-all-to-all", "collective-permute",
                                                          "collective-broadcast"};
  return kOps;
}

}  // namespace

Result<std::string> hlo_module_of(std::string_view serialized_module_with_config) {
  WireReader r(serialized_module_with_config);
  while (!r.done()) {
    int field = 0, type = 0;
    KILN_RETURN_IF_ERROR(r.next(field, type));
    if (field == 1 && type == 2) {
      KILN_ASSIGN_OR_RETURN(std::string_view module, r.bytes());
      return std::string(module);
    }
    KILN_RETURN_IF_ERROR(r.skip(type));
  }
  return invalid_argument("hlo module with config: no module (field 1)");
}

Result<HloCensus> hlo_census(std::string_view serialized_module) {
  std::unordered_map<int64_t, Computation> computations;
  int64_t entry_id = -1;
  std::string entry_name;
  WireReader r(serialized_module);
  while (!r.done()) {
    int field = 0, type = 0;
    KILN_RETURN_IF_ERROR(r.next(field, type));
    if (field == 3 && type == 2) {
      KILN_ASSIGN_OR_RETURN(std::string_view s, r.bytes());
      KILN_ASSIGN_OR_RETURN(Computation c, read_computation(s));
      const int64_t id = c.id;
      computations[id] = std::move(c);
    } else if (field == 6 && type == 0) {
      KILN_ASSIGN_OR_RETURN(uint64_t id, r.varint());
      entry_id = static_cast<int64_t>(id);
    } else if (field == 2 && type == 2) {
      KILN_ASSIGN_OR_RETURN(std::string_view s, r.bytes());
      entry_name = std::string(s);
    } else {
      KILN_RETURN_IF_ERROR(r.skip(type));
    }
  }
  if (!computations.contains(entry_id)) {
    entry_id = -1;
    for (const auto& [id, c] : computations) {
      if (c.name == entry_name) entry_id = id;
    }
  }
  if (entry_id < 0) return invalid_argument("hlo module: no entry computation among {} computations", computations.size());

  // Whether a computation (a fusion's body, an async wrapper's) holds `opcodes`, nested fusions included.
  std::function<bool(int64_t, const std::set<std::string, std::less<>>&)> holds =
      [&](int64_t id, const std::set<std::string, std::less<>>& opcodes) {
        auto it = computations.find(id);
        if (it == computations.end()) return false;
        for (const Instruction& instr : it->second.instructions) {
          if (opcodes.contains(instr.opcode)) return true;
          if (instr.opcode == "fusion") {
            for (int64_t called : instr.called) {
              if (holds(called, opcodes)) return true;
            }
          }
        }
        return false;
      };
  static const std::set<std::string, std::less<>> kGemm = {"dot", "convolution"};
  static const std::set<std::string, std::less<>> kRagged = {"ragged-dot"};

  HloCensus census;
  auto count_collective = [&](std::string_view opcode, bool async) {
    census.collectives[std::string(opcode)] += 1;
    if (async) census.async_collectives[std::string(opcode)] += 1;
  };
  std::set<int64_t> visited;
  std::function<void(int64_t)> walk = [&](int64_t id) {
    if (!visited.insert(id).second) return;
    auto it = computations.find(id);
    if (it == computations.end()) return;
    for (const Instruction& instr : it->second.instructions) {
      const std::string& op = instr.opcode;
      if (op == "parameter" || op == "constant" || op == "get-tuple-element" || op == "tuple" || op == "bitcast" ||
          op.ends_with("-done")) {
        continue;  // bookkeeping, not work
      }
      census.instructions += 1;
      if (op == "fusion") {
        census.fusions += 1;
        census.fusion_kinds[instr.fusion_kind.empty() ? "unknown" : instr.fusion_kind] += 1;
        for (int64_t called : instr.called) {
          if (holds(called, kRagged)) {
            census.grouped_matmuls += 1;
            break;
          }
          if (holds(called, kGemm)) {
            census.gemms += 1;
            break;
          }
        }
      } else if (op == "custom-call") {
        census.custom_calls[instr.custom_call_target] += 1;
        const std::string& t = instr.custom_call_target;
        if (t.find("fmha") != std::string::npos || t.find("flash") != std::string::npos) {
          census.attention += 1;
        } else if (t.find("gemm") != std::string::npos || t.find("matmul") != std::string::npos) {
          census.gemms += 1;
        } else if (t == "ragged_all_to_all") {
          count_collective("ragged-all-to-all", false);
        }
      } else if (kGemm.contains(op)) {
        census.gemms += 1;
      } else if (kRagged.contains(op)) {
        census.grouped_matmuls += 1;
      } else if (collective_opcodes().contains(op)) {
        count_collective(op, false);
      } else if (op.ends_with("-start") && collective_opcodes().contains(op.substr(0, op.size() - 6))) {
        count_collective(op.substr(0, op.size() - 6), true);
      } else if (op == "async-start") {
        // An async wrapper around one operation: count what it wraps as async.
        for (int64_t called : instr.called) {
          auto wrapped = computations.find(called);
          if (wrapped == computations.end()) continue;
          for (const Instruction& inner : wrapped->second.instructions) {
            if (collective_opcodes().contains(inner.opcode)) {
              count_collective(inner.opcode, true);
            } else if (inner.opcode == "fusion" || inner.opcode == "custom-call") {
              walk(called);  // an async kernel: count it as one
              break;
            }
          }
        }
      } else if (op == "while" || op == "conditional" || op == "call") {
        if (op == "while") census.while_loops += 1;
        for (int64_t called : instr.called) walk(called);
      }
    }
  };
  walk(entry_id);
  return census;
}

}  // namespace kiln::backend::pjrt
