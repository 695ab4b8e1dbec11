// IR text: one instruction per line, HLO-like.
//
//   module @block
//
//   ENTRY computation @main {
//     %x.0 = f32[2,4] parameter(), index=0, name="x", axes={activation_batch,activation_embed}
//     %c.1 = f32[] constant(0.5)
//     %b.2 = f32[2,4] broadcast(%c.1), dims={}
//     ROOT %mul.3 = f32[2,4] mul(%x.0, %b.2), name="scaled", loc="block.cc:12"
//   }
//
// Op attributes come first (sorted by key), then the metadata keys name, loc, axes,
// sharding, and calls={@body} for instructions that call a computation. parse(print(m))
// reproduces m exactly (parser.h).
#pragma once

#include <string>

#include "kiln/ir/instr.h"

namespace kiln::ir {

std::string print_instr(const Instr& instr);
std::string print_computation(const Computation& computation);
std::string print_module(const Module& module);

}  // namespace kiln::ir
