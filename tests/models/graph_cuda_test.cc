// GraphNet (gcn and sage) on a GPU against the CPU: the same weights, graph
// and CSR bag-of-words features moved to the device give the same logits and
// the same weight gradients (to f32 rounding). No new kernel: the layers'
// products are the CSR SpMM routes of sparse/cuda. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "gtest/gtest.h"
#include "models/graph_net.h"
#include "models/zoo.h"
#include "sparse/csr.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// A ring of n nodes with chords every 7 nodes, and a CSR bag of words
// [n, v] of 3 words a row.
Tensor ring(int64_t n) {
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(n));
  const auto link = [&](int64_t a, int64_t b) {
    rows[static_cast<size_t>(a)].push_back(static_cast<int32_t>(b));
    rows[static_cast<size_t>(b)].push_back(static_cast<int32_t>(a));
  };
  for (int64_t i = 0; i < n; ++i) link(i, (i + 1) % n);
  for (int64_t i = 0; i + 7 < n; i += 7) link(i, i + 7);
  std::vector<int32_t> crow{0}, col;
  for (auto& r : rows) {
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    col.insert(col.end(), r.begin(), r.end());
    crow.push_back(static_cast<int32_t>(col.size()));
  }
  return sparse_csr(from_vector(crow), from_vector(col), from_vector(std::vector<float>(col.size(), 1.0f)), {n, n});
}

Tensor words(int64_t n, int64_t v) {
  std::vector<int32_t> crow{0}, col;
  std::vector<float> vals;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> r = {static_cast<int32_t>((i * 13) % v), static_cast<int32_t>((i * 29 + 5) % v),
                              static_cast<int32_t>((i * 71 + 11) % v)};
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    for (int32_t c : r) {
      col.push_back(c);
      vals.push_back(0.25f + static_cast<float>(c % 5) * 0.1f);
    }
    crow.push_back(static_cast<int32_t>(col.size()));
  }
  return sparse_csr(from_vector(crow), from_vector(col), from_vector(vals), {n, v});
}

void expect_close(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  const std::vector<float> a = cpu.to(Device::cpu()).contiguous().to_vector<float>();
  const std::vector<float> b = gpu.to(Device::cpu()).contiguous().to_vector<float>();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::abs(a[i])) << what << " at " << i;
}

TEST(GraphNetCuda, GcnAndSageMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: the graph layers' CUDA products cannot run here";
  const int64_t n = 300, v = 500;
  const Tensor a = ring(n), x = words(n, v);
  const Tensor targets = from_vector(std::vector<int64_t>(static_cast<size_t>(n), 1));
  for (const std::string name : {"gcn", "sage"}) {
    ModelConfig c;
    c.name = name;
    c.options["sizes"] = str_cat(v, ",16,4");
    c.options["dropout"] = 0.0;
    ModulePtr cpu = make_model(c), gpu = make_model(c);  // the same seed: the same weights
    gpu->to(Device::cuda(0));
    dynamic_cast<GraphNet&>(*cpu).set_graph(a);
    dynamic_cast<GraphNet&>(*gpu).set_graph(to_device(a, Device::cuda(0)));
    const Variable y_cpu = cpu->forward(Variable(x));
    const Variable y_gpu = gpu->forward(Variable(to_device(x, Device::cuda(0))));
    expect_close(y_cpu.value(), y_gpu.value(), name + " logits");
    cross_entropy(y_cpu, targets).backward();
    cross_entropy(y_gpu, targets.to(Device::cuda(0))).backward();
    const NamedParameters pc = cpu->named_parameters(), pg = gpu->named_parameters();
    ASSERT_EQ(pc.size(), pg.size());
    for (size_t i = 0; i < pc.size(); ++i)
      expect_close(pc[i].second.grad(), pg[i].second.grad(), name + " " + pc[i].first + " gradient");
  }
}

}  // namespace
}  // namespace coppice
