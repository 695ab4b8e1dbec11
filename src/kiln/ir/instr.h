// Instructions, computations and modules: the SSA graph every stage of Kiln reads and
// writes. A Module owns Computations; a Computation owns its Instrs in program order
// (always a topological order: operands come before users); the ENTRY computation is the
// program, others are bodies that instructions call (fusions, later).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/ir/attrs.h"
#include "kiln/ir/literal.h"
#include "kiln/ir/opcode.h"
#include "kiln/ir/shape.h"

namespace kiln::ir {

class Computation;
class Module;

// What a value means to a person and to the sharding pass; never changes semantics.
struct Metadata {
  std::string name;                 // "layers.3.mlp.router_logits"
  std::string loc;                  // source location of the model line, "gpt_oss.cc:120"
  std::vector<std::string> axes;    // logical axis names, one per dimension ("" = none)
  std::optional<Sharding> sharding; // mesh sharding, once assigned
  // A scheduling stage: among instructions ready to run, a lower stage goes first (0: none).
  // Gradient accumulation numbers each micro-batch's forward and backward pass, so one
  // micro-batch finishes (and frees its activations) before the next one starts.
  int32_t stage = 0;
  bool operator==(const Metadata& o) const {
    return name == o.name && loc == o.loc && axes == o.axes && sharding == o.sharding && stage == o.stage;
  }
};

class Instr {
 public:
  const std::string& id() const { return id_; }  // SSA name, printed with a leading %
  Opcode opcode() const { return opcode_; }
  const Shape& shape() const { return shape_; }
  void set_shape(Shape shape) { shape_ = std::move(shape); }

  const std::vector<Instr*>& operands() const { return operands_; }
  Instr* operand(int i) const { return operands_.at(i); }
  int num_operands() const { return static_cast<int>(operands_.size()); }
  const std::vector<Instr*>& users() const { return users_; }

  const Attrs& attrs() const { return attrs_; }
  Attrs& mutable_attrs() { return attrs_; }
  const Literal& literal() const;  // constants only
  bool has_literal() const { return literal_ != nullptr; }

  const Metadata& meta() const { return meta_; }
  Metadata& mutable_meta() { return meta_; }

  const std::vector<Computation*>& called() const { return called_; }
  void set_called(std::vector<Computation*> called) { called_ = std::move(called); }
  Computation* parent() const { return parent_; }

  // Rewires operand i; keeps user lists consistent.
  void replace_operand(int i, Instr* new_operand);
  // Makes every user of this instruction use `other` instead (and the root, if this is it).
  void replace_all_uses_with(Instr* other);

  // This instruction as one line of IR text (without indentation).
  std::string to_string() const;

 private:
  friend class Computation;
  friend class Module;  // clone() copies private fields
  Instr() = default;
  void remove_user(Instr* user);

  std::string id_;
  Opcode opcode_ = Opcode::kParameter;
  Shape shape_;
  std::vector<Instr*> operands_;
  std::vector<Instr*> users_;  // one entry per use (an instr using x twice appears twice)
  Attrs attrs_;
  std::shared_ptr<const Literal> literal_;  // shared: cloning a module does not copy weights
  Metadata meta_;
  std::vector<Computation*> called_;
  Computation* parent_ = nullptr;
  // Scratch for Computation::topo_sort: the position it last gave this instruction (reading
  // it is valid only inside topo_sort, which sets it first).
  size_t topo_index_ = 0;
};

class Computation {
 public:
  const std::string& name() const { return name_; }
  Module* parent() const { return parent_; }

  // Appends a new instruction. The id is chosen from the opcode ("add.17") unless given.
  Instr* add(Opcode opcode, Shape shape, std::vector<Instr*> operands, Attrs attrs = {},
             std::string id = "");
  Instr* add_constant(Literal literal, std::string id = "");

  const std::vector<std::unique_ptr<Instr>>& instructions() const { return instrs_; }
  int64_t size() const { return static_cast<int64_t>(instrs_.size()); }

  // Parameters by their `index` attribute.
  const std::vector<Instr*>& params() const { return params_; }
  Instr* param(int index) const { return params_.at(index); }
  int num_params() const { return static_cast<int>(params_.size()); }

  Instr* root() const { return root_; }
  void set_root(Instr* root) { root_ = root; }

  // Removes instructions that have no users (checked) and are not the root. One pass over
  // the list, so removing many at once stays linear.
  void remove(const std::vector<Instr*>& dead);
  void remove(Instr* dead) { remove(std::vector<Instr*>{dead}); }

  // Restores a topological program order after passes appended instructions that earlier
  // ones now use. Stable: an order that is already topological is left unchanged.
  void topo_sort();

  // Position of each instruction in program order (valid until the next change).
  std::vector<Instr*> post_order() const;

 private:
  friend class Module;
  std::string name_;
  Module* parent_ = nullptr;
  std::vector<std::unique_ptr<Instr>> instrs_;
  std::vector<Instr*> params_;
  Instr* root_ = nullptr;
};

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  Computation* add_computation(std::string name);
  Computation* entry() const { return entry_; }
  void set_entry(Computation* entry) { entry_ = entry; }
  Computation* find_computation(const std::string& name) const;
  // Removes a non-entry computation that no instruction calls (both checked).
  void remove_computation(Computation* computation);
  // The same for many at once, in one scan of the module.
  void remove_computations(const std::vector<Computation*>& dead);
  const std::vector<std::unique_ptr<Computation>>& computations() const { return computations_; }

  // A fresh SSA id "<stem>.<n>" unique in this module.
  std::string fresh_id(std::string_view stem);
  // Tells the id generator that `id` is taken (the parser calls this).
  void reserve_id(const std::string& id);

  // A deep copy (constants' data is shared, it is immutable).
  std::unique_ptr<Module> clone() const;

  // Total instruction count over all computations.
  int64_t instruction_count() const;

 private:
  std::string name_;
  std::vector<std::unique_ptr<Computation>> computations_;
  Computation* entry_ = nullptr;
  int64_t next_id_ = 0;
};

}  // namespace kiln::ir
