#include "autograd/functions/einsum_plan.h"

#include <algorithm>
#include <cctype>

#include "tensor/error.h"

namespace coppice {
namespace {

// The labels "..." stands for: digits, never letters, so they cannot clash
// with a written label.
constexpr int kMaxEllipsisDims = 10;
char ellipsis_label(int i) { return static_cast<char>('0' + i); }
bool is_ellipsis_label(char c) { return c >= '0' && c <= '9'; }

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// A term as written: its letters and where "..." sits (-1: nowhere).
struct Term {
  std::string letters;
  int ellipsis_at = -1;
};

Term parse_term(std::string_view text, std::string_view spec, const std::string& what) {
  Term term;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '.') {
      COPPICE_CHECK(text.substr(i, 3) == "..." && term.ellipsis_at < 0, "einsum '", spec, "': ", what,
                    " has a '.' that is not one \"...\"");
      term.ellipsis_at = static_cast<int>(term.letters.size());
      i += 2;
      continue;
    }
    COPPICE_CHECK(std::isalpha(static_cast<unsigned char>(c)), "einsum '", spec, "': ", what, " has '", c,
                  "'; labels are letters");
    term.letters += c;
  }
  return term;
}

// The term with "..." replaced by `dims` right-aligned ellipsis labels of
// `total`.
std::string expand(const Term& term, int dims, int total) {
  if (term.ellipsis_at < 0) return term.letters;
  std::string dots;
  for (int i = total - dims; i < total; ++i) dots += ellipsis_label(i);
  return term.letters.substr(0, term.ellipsis_at) + dots + term.letters.substr(term.ellipsis_at);
}

// Labels of `a` that pass `keep`, in a's order.
template <typename Keep>
std::string select(const std::string& a, Keep keep) {
  std::string out;
  for (char c : a)
    if (keep(c)) out += c;
  return out;
}

EinsumContraction plan_pair(const std::string& lhs, bool lhs_sparse, const std::string& rhs, bool rhs_sparse,
                            const std::string& needed_later) {
  EinsumContraction c;
  for (char l : lhs) {
    if (!has(rhs, l))
      c.left += l;
    else if (has(needed_later, l))
      c.batch += l;
    else
      c.contracted += l;
  }
  c.right = select(rhs, [&](char l) { return !has(lhs, l); });

  if (!lhs_sparse && !rhs_sparse) {
    c.route = c.contracted.empty() ? EinsumRoute::kDenseMul : EinsumRoute::kDenseBmm;
    c.result = c.batch + c.left + c.right;
    return c;
  }
  if (lhs_sparse && rhs_sparse) {
    std::string a = lhs, b = rhs;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a == b) {
      c.route = EinsumRoute::kSparseMul;
      c.summed_after = c.contracted;
      c.result = select(lhs, [&](char l) { return !has(c.contracted, l); });
      c.result_sparse = c.contracted.empty();
      return c;
    }
    if (lhs.size() == 2 && rhs.size() == 2 && c.batch.empty() && c.contracted.size() == 1) {
      c.route = EinsumRoute::kSpgemm;
      c.result = c.left + c.right;
      c.result_sparse = true;
      return c;
    }
    c.densify_rhs = true;
    rhs_sparse = false;
  }
  c.sparse_lhs = lhs_sparse;
  const std::string& s = lhs_sparse ? lhs : rhs;
  const std::string& d = lhs_sparse ? rhs : lhs;
  const std::string& s_only = lhs_sparse ? c.left : c.right;
  const std::string& d_only = lhs_sparse ? c.right : c.left;
  if (c.contracted.empty() && d_only.empty()) {
    c.route = EinsumRoute::kSparseScale;
    c.result = s;
    c.result_sparse = true;
  } else if (s.size() == 2 && c.batch.empty() && c.contracted.size() == 1 && s_only.size() == 1) {
    c.route = s[1] == c.contracted[0] ? EinsumRoute::kSparseLinear : EinsumRoute::kSparseMatmul;
    c.result = select(d, [&](char l) { return l != c.contracted[0]; }) + s_only;
  } else {
    c.route = EinsumRoute::kSparseBlockDiagonal;
    c.result = c.batch + s_only + d_only;
  }
  return c;
}

}  // namespace

const char* einsum_route_name(EinsumRoute route) {
  switch (route) {
    case EinsumRoute::kDenseMul: return "dense_mul";
    case EinsumRoute::kDenseBmm: return "dense_bmm";
    case EinsumRoute::kSparseScale: return "sparse_scale";
    case EinsumRoute::kSparseLinear: return "sparse_linear";
    case EinsumRoute::kSparseMatmul: return "sparse_matmul";
    case EinsumRoute::kSparseBlockDiagonal: return "sparse_block_diagonal";
    case EinsumRoute::kSpgemm: return "spgemm";
    case EinsumRoute::kSparseMul: return "sparse_mul";
  }
  return "?";
}

EinsumPlan plan_einsum(std::string_view spec, const std::vector<Shape>& shapes, const std::vector<bool>& sparse) {
  COPPICE_CHECK(!shapes.empty(), "einsum '", spec, "': expected at least one operand");
  COPPICE_CHECK(sparse.size() == shapes.size(), "einsum: ", shapes.size(), " shapes but ", sparse.size(),
                " format flags");
  std::string text;
  for (char c : spec)
    if (c != ' ') text += c;
  const size_t arrow = text.find("->");
  COPPICE_CHECK(arrow == std::string::npos || text.find("->", arrow + 2) == std::string::npos, "einsum '", spec,
                "': more than one \"->\"");
  const std::string lhs = text.substr(0, arrow);

  std::vector<Term> terms;
  size_t start = 0;
  for (;;) {
    size_t comma = lhs.find(',', start);
    std::string what = str_cat("operand ", terms.size());
    terms.push_back(parse_term(std::string_view(lhs).substr(start, comma - start), spec, what));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  COPPICE_CHECK(terms.size() == shapes.size(), "einsum '", spec, "': the spec names ", terms.size(),
                " operand(s), got ", shapes.size());

  EinsumPlan plan;
  std::vector<int> dots(terms.size(), 0);
  int total_dots = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const auto rank = static_cast<int>(shapes[i].size());
    const auto named = static_cast<int>(terms[i].letters.size());
    if (terms[i].ellipsis_at < 0) {
      COPPICE_CHECK(rank == named, "einsum '", spec, "': operand ", i, " has ", rank, " dims but its term '",
                    terms[i].letters, "' names ", named);
    } else {
      COPPICE_CHECK(rank >= named, "einsum '", spec, "': operand ", i, " has ", rank, " dims, fewer than its ", named,
                    " labels");
      dots[i] = rank - named;
      COPPICE_CHECK(dots[i] <= kMaxEllipsisDims, "einsum '", spec, "': \"...\" of operand ", i, " covers ", dots[i],
                    " dims (at most ", kMaxEllipsisDims, ")");
    }
    total_dots = std::max(total_dots, dots[i]);
  }
  std::map<char, size_t> first_seen;  // label -> operand that set its size
  for (size_t i = 0; i < terms.size(); ++i) {
    std::string labels = expand(terms[i], dots[i], total_dots);
    for (size_t d = 0; d < labels.size(); ++d) {
      const char l = labels[d];
      const int64_t size = shapes[i][d];
      auto [it, fresh] = plan.sizes.emplace(l, size);
      if (fresh || it->second == size || size == 1) {
        if (fresh) first_seen[l] = i;
        continue;
      }
      // A size-1 dim broadcasts against a larger one (NumPy's and torch's rule).
      COPPICE_CHECK(it->second == 1, "einsum '", spec,
                    "': ", is_ellipsis_label(l) ? std::string("a dim of \"...\"") : str_cat("label '", l, "'"),
                    " has size ", it->second, " in operand ", first_seen[l], " and ", size, " in operand ", i,
                    " (sizes must match, or one be 1 to broadcast)");
      it->second = size;
      first_seen[l] = i;
    }
    plan.inputs.push_back(std::move(labels));
  }
  // Each operand's broadcast labels: size 1 there, larger elsewhere. They are
  // squeezed out first, so the operand simply lacks them (which is what
  // broadcasting means in a contraction).
  std::vector<std::string> held(plan.inputs.size());
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const std::string& labels = plan.inputs[i];
    std::string broadcast;
    for (size_t d = 0; d < labels.size(); ++d) {
      const char l = labels[d];
      if (shapes[i][d] != 1 || plan.sizes.at(l) == 1 || has(broadcast, l)) continue;
      COPPICE_CHECK(std::count(labels.begin(), labels.end(), l) == 1, "einsum '", spec, "': label '", l,
                    "' repeats in operand ", i, " with size 1 where it has size ", plan.sizes.at(l),
                    " elsewhere; a repeated label does not broadcast");
      broadcast += l;
    }
    held[i] = select(labels, [&](char l) { return !has(broadcast, l); });
    EinsumPrep prep;
    prep.broadcast = std::move(broadcast);
    plan.prep.push_back(std::move(prep));
  }

  if (arrow != std::string::npos) {
    Term out = parse_term(std::string_view(text).substr(arrow + 2), spec, "the output");
    plan.output = expand(out, out.ellipsis_at < 0 ? 0 : total_dots, total_dots);
    for (size_t k = 0; k < plan.output.size(); ++k) {
      const char l = plan.output[k];
      COPPICE_CHECK(plan.output.find(l, k + 1) == std::string::npos, "einsum '", spec, "': the output repeats '", l,
                    "'");
      COPPICE_CHECK(plan.sizes.count(l) > 0, "einsum '", spec, "': the output's '", l,
                    "' is in no operand (to repeat along a new dim, use rearrange)");
    }
  } else {
    for (int i = 0; i < total_dots; ++i) plan.output += ellipsis_label(i);
    std::map<char, int> count;
    for (const auto& labels : plan.inputs)
      for (char l : labels) ++count[l];
    for (const auto& [l, n] : count)
      if (n == 1 && !is_ellipsis_label(l)) plan.output += l;
  }

  // Step 1, each operand alone (its broadcast labels squeezed out).
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    EinsumPrep& prep = plan.prep[i];
    const std::string& labels = held[i];
    std::string once;
    for (char l : labels) {
      if (std::count(labels.begin(), labels.end(), l) > 1) {
        if (!has(prep.diagonal, l)) prep.diagonal += l;
      } else {
        once += l;
      }
    }
    prep.densify = sparse[i] && !prep.diagonal.empty();
    const std::string distinct = once + prep.diagonal;
    prep.summed = select(distinct, [&](char l) {
      if (has(plan.output, l)) return false;
      for (size_t j = 0; j < plan.inputs.size(); ++j)
        if (j != i && has(held[j], l)) return false;
      return true;
    });
    prep.labels = select(distinct, [&](char l) { return !has(prep.summed, l); });
    // A sparse operand squeezed to no dims at all is summed, which is dense.
    prep.sparse = sparse[i] && !prep.densify && prep.summed.empty() && !(held[i].empty() && !prep.broadcast.empty());
  }

  // Step 2, pairwise from the left.
  std::string current = plan.prep[0].labels;
  bool current_sparse = plan.prep[0].sparse;
  for (size_t i = 1; i < plan.inputs.size(); ++i) {
    std::string later = plan.output;
    for (size_t j = i + 1; j < plan.inputs.size(); ++j) later += plan.prep[j].labels;
    EinsumContraction c = plan_pair(current, current_sparse, plan.prep[i].labels, plan.prep[i].sparse, later);
    c.rhs = static_cast<int>(i);
    current = c.result;
    current_sparse = c.result_sparse;
    plan.contractions.push_back(std::move(c));
  }
  return plan;
}

std::vector<std::string> describe(const EinsumPlan& plan) {
  auto shown = [](const std::string& labels) {
    std::string out;
    for (char l : labels) out += is_ellipsis_label(l) ? str_cat("<", l, ">") : std::string(1, l);
    return out.empty() ? std::string("-") : out;
  };
  std::vector<std::string> lines;
  for (size_t i = 0; i < plan.prep.size(); ++i) {
    const EinsumPrep& p = plan.prep[i];
    if (!p.broadcast.empty()) lines.push_back(str_cat("operand ", i, ": broadcast over ", shown(p.broadcast)));
    if (p.densify) lines.push_back(str_cat("operand ", i, ": made dense (a sparse diagonal)"));
    if (!p.diagonal.empty()) lines.push_back(str_cat("operand ", i, ": diagonal over ", shown(p.diagonal)));
    if (!p.summed.empty()) lines.push_back(str_cat("operand ", i, ": sum over ", shown(p.summed)));
  }
  for (const EinsumContraction& c : plan.contractions) {
    std::string line = str_cat("with operand ", c.rhs, ": ", einsum_route_name(c.route));
    if (c.densify_rhs) line += " (operand made dense first)";
    line += str_cat(", batch ", shown(c.batch), ", contracted ", shown(c.contracted), " -> ", shown(c.result),
                    c.result_sparse ? " sparse" : " dense");
    lines.push_back(std::move(line));
  }
  lines.push_back(str_cat("output ", shown(plan.output)));
  return lines;
}

}  // namespace coppice
