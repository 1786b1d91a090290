#include "autograd/functions/grad_utils.h"

#include <algorithm>

#include "tensor/ops.h"

namespace coppice::autograd_detail {

Tensor through_relu(const Tensor& g, const Tensor& y) { return y.defined() ? relu_backward(g, y) : g; }

std::pair<Tensor, Tensor> linear_output_grads(const Tensor& g, const Tensor& y, bool bias) {
  const int64_t out = g.dim() == 0 ? 1 : g.size(-1);
  if (y.defined() && bias) return relu_backward_col_sums(g.reshape({-1, out}), y.reshape({-1, out}));
  const Tensor g2 = through_relu(g, y).reshape({-1, out});
  return {g2, bias ? sum(g2, {0}) : Tensor()};
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const Shape& gs = grad.shape();
  COPPICE_CHECK(gs.size() >= shape.size(), "backward: cannot sum a gradient of shape ", shape_to_string(gs),
                " down to ", shape_to_string(shape));
  size_t lead = gs.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < gs.size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && gs[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

Tensor mask_grad(const Tensor& grad, const Tensor& mask) {
  return where(mask, grad, scalar_tensor(0.0, grad.options()));
}

std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, std::string_view op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(normalize_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Tensor unsqueeze_dims(const Tensor& t, const std::vector<int64_t>& dims) {
  Tensor r = t;
  for (int64_t d : dims) r = r.unsqueeze(d);
  return r;
}

}  // namespace coppice::autograd_detail
