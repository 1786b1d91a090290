#include "models/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "autograd/functions/einsum.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/nn.h"
#include "autograd/functions/rearrange.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/sparse.h"
#include "sparse/bsr.h"
#include "sparse/csr.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

int64_t default_block(int64_t hidden) {
  int64_t b = 1;
  while (b < 64 && hidden % (b * 2) == 0) b *= 2;
  return b;
}

}  // namespace

// The gates as a sparse CSR [T, columns]: token t's k entries at cols[t * k
// ...] (increasing within a token), holding gates [T, k] row by row.
Variable MoE::gate_matrix(const Variable& gates, const std::vector<int64_t>& cols, int64_t columns) const {
  const int64_t T = gates.size(0), k = o_.top_k;
  const Device device = gates.value().device();
  std::vector<int64_t> crow(static_cast<size_t>(T + 1));
  for (int64_t t = 0; t <= T; ++t) crow[t] = t * k;
  Tensor pattern = sparse_csr(from_vector(crow, {T + 1}).to(device), from_vector(cols, {T * k}).to(device),
                              zeros({T * k}, gates.value().options()), {T, columns});
  return with_values(pattern, reshape(gates, {T * k}));
}

// Which experts each token takes, and with what weight.
struct MoE::Routing {
  Variable probs;               // [T, E], the router's softmax
  Variable gates;               // [T, k]: each token's gate weights, its experts in increasing order
  std::vector<int64_t> chosen;  // host [T * k]: those experts
};

MoE::MoE(const MoEOptions& moe, const LayerOptions& options, Generator& gen) : Module("MoE"), o_(moe) {
  COPPICE_CHECK(o_.dim > 0 && o_.hidden > 0, "MoE: dim and hidden must be positive, got ", o_.dim, " and ", o_.hidden);
  COPPICE_CHECK(o_.experts >= 1, "MoE: experts must be at least 1, got ", o_.experts);
  COPPICE_CHECK(o_.top_k >= 1 && o_.top_k <= o_.experts, "MoE: top_k must be in [1, experts = ", o_.experts, "], got ",
                o_.top_k);
  if (o_.block == 0) o_.block = default_block(o_.hidden);
  COPPICE_CHECK(o_.block > 0 && o_.hidden % o_.block == 0, "MoE: block ", o_.block, " must divide hidden ", o_.hidden);
  COPPICE_CHECK(o_.aux_loss >= 0.0 && std::isfinite(o_.aux_loss), "MoE: aux_loss must be finite and >= 0, got ",
                o_.aux_loss);
  router_ = register_module("router", std::make_shared<Linear>(o_.dim, o_.experts, /*bias=*/false, options, gen));
  // As E separate Linear(dim, hidden) and Linear(hidden, dim) would be.
  const double b1 = 1.0 / std::sqrt(static_cast<double>(o_.dim));
  const double b2 = 1.0 / std::sqrt(static_cast<double>(o_.hidden));
  w1_ = register_parameter("w1", Variable(uniform_init({o_.experts * o_.hidden, o_.dim}, b1, options, gen), true));
  w2_ = register_parameter("w2", Variable(uniform_init({o_.experts * o_.hidden, o_.dim}, b2, options, gen), true));
}

MoE::Routing MoE::route(const Variable& x2) {
  const int64_t T = x2.size(0), k = o_.top_k;
  Routing r;
  r.probs = softmax(router_->forward(x2), 1);
  // The top k on the device, read once to the host: the grouping below is
  // data-dependent.
  Tensor idx = topk(r.probs.value(), k, 1).indices.to(Device::cpu()).to(DType::kI64).contiguous();
  r.chosen.assign(idx.data<int64_t>(), idx.data<int64_t>() + T * k);
  for (int64_t t = 0; t < T; ++t) std::sort(r.chosen.begin() + t * k, r.chosen.begin() + (t + 1) * k);
  Tensor sorted = from_vector(r.chosen, {T, k}).to(x2.value().device());
  r.gates = gather(r.probs, 1, sorted);
  // Top-1 keeps the router's probability (Switch), or the router would learn
  // from the load-balancing loss alone.
  if (o_.renormalize && k > 1) r.gates = div(r.gates, sum(r.gates, {1}, /*keepdim=*/true));
  // Load balancing: E * sum_e f_e P_e.
  if (is_training() && o_.aux_loss > 0.0) {
    std::vector<double> fraction(static_cast<size_t>(o_.experts), 0.0);
    for (int64_t e : r.chosen) fraction[e] += 1.0 / static_cast<double>(T * k);
    Tensor f = from_vector(fraction).to(r.probs.value().options());
    Variable p_mean = mean(r.probs, {0});
    set_auxiliary_loss(mul(sum(mul(p_mean, Variable(f))), o_.aux_loss * static_cast<double>(o_.experts)));
  } else {
    set_auxiliary_loss(Variable());
  }
  return r;
}

Variable MoE::forward(const Variable& x) {
  COPPICE_CHECK(x.dim() >= 1 && x.size(-1) == o_.dim, "MoE: input's last dim is ", x.dim() ? x.size(-1) : 0,
                ", expected dim = ", o_.dim);
  const Shape shape = x.shape();
  Variable x2 = reshape(x, {-1, o_.dim});
  const int64_t T = x2.size(0), k = o_.top_k, E = o_.experts, H = o_.hidden, b = o_.block;
  const Routing r = route(x2);
  const Device device = x.value().device();

  // Each expert's group of tokens, padded to whole blocks of rows.
  std::vector<std::vector<int64_t>> group(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) group[r.chosen[t * k + j]].push_back(t);
  std::vector<int64_t> offset(static_cast<size_t>(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) offset[e + 1] = offset[e] + (static_cast<int64_t>(group[e].size()) + b - 1) / b * b;
  const int64_t R = offset[E];
  std::vector<int64_t> token_of_row(static_cast<size_t>(R), T);  // T: the zero row
  std::vector<int64_t> next(static_cast<size_t>(E), 0);
  std::vector<int64_t> combine_cols(static_cast<size_t>(T * k));
  for (int64_t e = 0; e < E; ++e)
    for (size_t i = 0; i < group[e].size(); ++i) token_of_row[offset[e] + static_cast<int64_t>(i)] = group[e][i];
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = r.chosen[t * k + j];
      combine_cols[t * k + j] = offset[e] + next[e]++;
    }
  }

  // The experts' topology: row block i of expert e's group holds column
  // blocks e * H / b ... (e + 1) * H / b - 1 of the hidden units.
  const int64_t blocks_per_expert = H / b;
  std::vector<int64_t> crow{0}, cols;
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t rb = offset[e] / b; rb < offset[e + 1] / b; ++rb) {
      for (int64_t c = 0; c < blocks_per_expert; ++c) cols.push_back(e * blocks_per_expert + c);
      crow.push_back(static_cast<int64_t>(cols.size()));
    }
  }
  const TensorOptions values_options = x.value().options();
  const auto n_blocks = static_cast<int64_t>(cols.size());
  Tensor topology = sparse_bsr(from_vector(crow, {R / b + 1}).to(device), from_vector(cols, {n_blocks}).to(device),
                               zeros({n_blocks, b, b}, values_options), {R, E * H});

  Variable padded = cat({x2, Variable(zeros({1, o_.dim}, values_options))}, 0);
  Variable xg = index_select(padded, 0, from_vector(token_of_row, {R}).to(device));
  Variable h = gelu_of_form(sddmm(xg, t(*w1_), topology), o_.gelu);
  Variable yg = matmul(h, *w2_);  // [R, dim]

  // The gate as a sparse [T, R]: token t's k rows, weighted.
  return reshape(matmul(gate_matrix(r.gates, combine_cols, R), yg), shape);
}

Variable MoE::forward_einsum(const Variable& x) {
  const Shape shape = x.shape();
  Variable x2 = reshape(x, {-1, o_.dim});
  const int64_t E = o_.experts;
  const Routing r = route(x2);
  Variable gates = gate_matrix(r.gates, r.chosen, E);  // sparse [T, E]
  Variable w1 = reshape(*w1_, {E, o_.hidden, o_.dim}), w2 = reshape(*w2_, {E, o_.hidden, o_.dim});
  Variable x_dispatch = rearrange(x2, "td->ted", {{"e", E}});
  Variable h = gelu_of_form(einsum("ted,ehd->teh", {x_dispatch, w1}), o_.gelu);
  Variable y_experts = einsum("teh,ehd->ted", {h, w2});
  return reshape(einsum("ted,te->td", {y_experts, gates}), shape);
}

}  // namespace coppice
