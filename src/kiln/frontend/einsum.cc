// einsum and matmul lowered to dot_general (+ reduce_sum for labels summed out of a single
// operand, + transpose to the requested output order).
#include <algorithm>
#include <string>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"

namespace kiln::frontend {

namespace {

struct Spec {
  std::vector<std::string> inputs;
  std::string output;
};

Spec parse_spec(const std::string& spec, size_t operands) {
  size_t arrow = spec.find("->");
  KILN_CHECK(arrow != std::string::npos) << "einsum '" << spec << "' needs an explicit '->output'";
  Spec s;
  std::string lhs = spec.substr(0, arrow);
  s.output = spec.substr(arrow + 2);
  size_t comma = lhs.find(',');
  if (comma == std::string::npos) {
    s.inputs = {lhs};
  } else {
    s.inputs = {lhs.substr(0, comma), lhs.substr(comma + 1)};
  }
  KILN_CHECK_EQ(s.inputs.size(), operands) << "einsum '" << spec << "'";
  for (const auto& in : s.inputs) {
    for (char c : in) KILN_CHECK(std::count(in.begin(), in.end(), c) == 1) << "repeated label in einsum '" << spec << "'";
  }
  return s;
}

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// Sums labels of `labels` that appear in neither `other` nor `out`; returns the new labels.
Tensor sum_unused(const Tensor& x, std::string& labels, const std::string& other, const std::string& out) {
  std::vector<int64_t> axes;
  std::string kept;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!has(other, labels[i]) && !has(out, labels[i])) {
      axes.push_back(static_cast<int64_t>(i));
    } else {
      kept += labels[i];
    }
  }
  labels = kept;
  return axes.empty() ? x : x.sum(axes);
}

Tensor to_output_order(const Tensor& x, const std::string& labels, const std::string& out) {
  KILN_CHECK_EQ(labels.size(), out.size()) << "einsum output '" << out << "' vs '" << labels << "'";
  std::vector<int64_t> perm;
  for (char c : out) {
    size_t p = labels.find(c);
    KILN_CHECK(p != std::string::npos) << "einsum output label '" << c << "' is not an input label";
    perm.push_back(static_cast<int64_t>(p));
  }
  return x.transpose(perm);
}

}  // namespace

Tensor einsum(const std::string& spec, const Tensor& a) {
  Spec s = parse_spec(spec, 1);
  std::string labels = s.inputs[0];
  Tensor x = sum_unused(a, labels, "", s.output);
  return to_output_order(x, labels, s.output);
}

Tensor einsum(const std::string& spec, const Tensor& a, const Tensor& b) {
  Spec s = parse_spec(spec, 2);
  std::string la = s.inputs[0], lb = s.inputs[1];
  KILN_CHECK_EQ(static_cast<int>(la.size()), a.rank()) << "einsum '" << spec << "' lhs " << a.shape().to_string();
  KILN_CHECK_EQ(static_cast<int>(lb.size()), b.rank()) << "einsum '" << spec << "' rhs " << b.shape().to_string();
  Tensor x = sum_unused(a, la, lb, s.output);
  Tensor y = sum_unused(b, lb, la, s.output);
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contract, rhs_contract;
  std::string batch, lhs_free, rhs_free;
  for (size_t i = 0; i < la.size(); ++i) {
    char c = la[i];
    size_t j = lb.find(c);
    if (j == std::string::npos) {
      lhs_free += c;
    } else if (has(s.output, c)) {
      lhs_batch.push_back(static_cast<int64_t>(i));
      rhs_batch.push_back(static_cast<int64_t>(j));
      batch += c;
    } else {
      lhs_contract.push_back(static_cast<int64_t>(i));
      rhs_contract.push_back(static_cast<int64_t>(j));
    }
  }
  for (char c : lb) {
    if (!has(la, c)) rhs_free += c;
  }
  ir::Instr* dot = x.graph()->builder().dot_general(x.instr(), y.instr(), lhs_batch, rhs_batch, lhs_contract, rhs_contract);
  return to_output_order(Tensor(x.graph(), dot), batch + lhs_free + rhs_free, s.output);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.rank() >= 2 && b.rank() >= 2) << "matmul needs rank >= 2 operands";
  const std::string letters = "abcdefghijklmnopqrstuvw";
  if (b.rank() == 2) {
    std::string la = letters.substr(0, a.rank() - 1) + "y";
    return einsum(la + ",yz->" + la.substr(0, a.rank() - 1) + "z", a, b);
  }
  KILN_CHECK_EQ(a.rank(), b.rank()) << "matmul of " << a.shape().to_string() << " and " << b.shape().to_string();
  std::string batch = letters.substr(0, a.rank() - 2);
  return einsum(batch + "xy," + batch + "yz->" + batch + "xz", a, b);
}

}  // namespace kiln::frontend
