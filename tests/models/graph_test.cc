// The graph layers (models/graph_conv.h), their adjacencies
// (models/graph_adjacency.h) and GraphNet (models/graph_net.h): Â and the
// mean adjacency against their formulas on a small graph, float64
// gradchecks of GCNConv and SAGEConv (node features dense and requiring
// grad, and a CSR bag of words as a constant), the zoo's gcn and sage, CSR
// features never densified, and the errors for a missing or bad graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "models/graph_adjacency.h"
#include "models/graph_conv.h"
#include "models/graph_net.h"
#include "models/zoo.h"
#include "sparse/convert.h"
#include "sparse/csr.h"
#include "sparse/sparse_impl.h"
#include "tests/models/test_util.h"

namespace coppice {
namespace {

using testing::error_of;
using testing::gradcheck_module;

const LayerOptions kF64{DType::kF64};

// A path 0-1-2 and an edge 2-3, plus node 4 alone: degrees 1, 2, 2, 1, 0.
Tensor small_graph(DType dtype = DType::kF32) {
  const std::vector<int32_t> crow = {0, 1, 3, 5, 6, 6};
  const std::vector<int32_t> col = {1, 0, 2, 1, 3, 2};
  const std::vector<double> v(6, 1.0);
  return sparse_csr(from_vector(crow), from_vector(col), from_vector(v).to(TensorOptions(dtype)), {5, 5});
}

// A CSR [5, 6] bag of words with rows of 0 to 3 words.
Tensor small_features() {
  const std::vector<int32_t> crow = {0, 2, 3, 6, 7, 7};
  const std::vector<int32_t> col = {0, 4, 2, 1, 3, 5, 0};
  const std::vector<double> v = {0.5, 1.5, -1.0, 0.25, 2.0, 0.75, 1.0};
  return sparse_csr(from_vector(crow), from_vector(col), from_vector(v), {5, 6});
}

void expect_all(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' in: " << message;
}

Tensor randn64(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, DType::kF64, gen);
}

TEST(GraphAdjacency, GcnIsSymmetricNormalizedWithSelfLoops) {
  const std::vector<double> a = to_dense(gcn_adjacency(small_graph())).to(DType::kF64).to_vector<double>();
  const double deg[5] = {2, 3, 3, 2, 1};  // with the self-loop
  const bool edge[5][5] = {{1, 1, 0, 0, 0}, {1, 1, 1, 0, 0}, {0, 1, 1, 1, 0}, {0, 0, 1, 1, 0}, {0, 0, 0, 0, 1}};
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 5; ++j) {
      const double want = edge[i][j] ? 1.0 / std::sqrt(deg[i] * deg[j]) : 0.0;
      EXPECT_NEAR(a[i * 5 + j], want, 1e-6) << i << "," << j;
    }
  }
}

TEST(GraphAdjacency, MeanRowsSumToOneWithoutTheDiagonal) {
  const std::vector<double> m = to_dense(mean_adjacency(small_graph())).to(DType::kF64).to_vector<double>();
  const std::vector<double> want = {0, 1, 0, 0, 0, 0.5, 0, 0.5, 0, 0, 0, 0.5, 0, 0.5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(m[k], want[k], 1e-7) << k;
}

TEST(GraphAdjacency, RefusesWhatIsNotASquareCsr) {
  expect_all(error_of([] { gcn_adjacency(zeros({3, 3})); }), {"gcn_adjacency", "adjacency", "CSR", "dense"});
  const Tensor rect = to_format(ones({2, 3}), "csr");
  expect_all(error_of([&] { mean_adjacency(rect); }), {"mean_adjacency", "square"});
}

// gradcheck of layer.forward(adjacency, x) over x (when it requires grad)
// and the layer's parameters.
template <typename Layer>
GradcheckResult gradcheck_graph_layer(Layer& layer, const Tensor& adjacency, const Variable& x) {
  struct Wrapped : Module {
    Layer& l;
    Tensor a;
    Wrapped(Layer& layer, Tensor adj) : Module("Wrapped"), l(layer), a(std::move(adj)) {}
    Variable forward(const Variable& h) override { return l.forward(a, h); }
  };
  NamedParameters params = layer.named_parameters();
  std::vector<Variable> inputs = {x};
  for (const auto& [name, v] : params) inputs.push_back(v);
  auto f = [&](const std::vector<Variable>& in) {
    for (size_t i = 0; i < params.size(); ++i) layer.set_parameter(params[i].first, in[i + 1]);
    return layer.forward(adjacency, in[0]);
  };
  GradcheckResult r = gradcheck(f, inputs);
  for (const auto& [name, v] : params) layer.set_parameter(name, v);
  return r;
}

TEST(GCNConv, GradcheckF64DenseAndSparseFeatures) {
  Generator gen(3);
  GCNConv conv(6, 4, kF64, gen);
  const Tensor a = gcn_adjacency(small_graph(DType::kF64));
  EXPECT_EQ(conv.forward(a, Variable(randn64({5, 6}, 1))).shape(), (Shape{5, 4}));
  EXPECT_GRADCHECK_OK(gradcheck_graph_layer(conv, a, Variable(randn64({5, 6}, 1), true)));
  EXPECT_GRADCHECK_OK(gradcheck_graph_layer(conv, a, Variable(small_features())));
}

TEST(SAGEConv, GradcheckF64DenseAndSparseFeatures) {
  Generator gen(4);
  SAGEConv conv(6, 3, kF64, gen);
  const Tensor m = mean_adjacency(small_graph(DType::kF64));
  EXPECT_GRADCHECK_OK(gradcheck_graph_layer(conv, m, Variable(randn64({5, 6}, 2), true)));
  EXPECT_GRADCHECK_OK(gradcheck_graph_layer(conv, m, Variable(small_features())));
}

TEST(SAGEConv, IsSelfPlusTheMeanOfTheNeighbours) {
  Generator gen(5);
  SAGEConv conv(6, 3, kF64, gen);
  const Tensor x = randn64({5, 6}, 7);
  const Tensor y = conv.forward(mean_adjacency(small_graph(DType::kF64)), Variable(x)).value();
  const NamedParameters p = conv.named_parameters();
  Tensor ws, bs, wn;
  for (const auto& [name, v] : p) {
    if (name == "self.weight") ws = v.value();
    if (name == "self.bias") bs = v.value();
    if (name == "neighbours.weight") wn = v.value();
  }
  ASSERT_TRUE(ws.defined() && bs.defined() && wn.defined());
  // Node 1's neighbours are 0 and 2; node 4 has none.
  const Tensor mean1 = mul(add(x.select(0, 0), x.select(0, 2)), 0.5);
  const Tensor want1 = add(add(matmul(ws, x.select(0, 1)), bs), matmul(wn, mean1));
  const Tensor want4 = add(matmul(ws, x.select(0, 4)), bs);
  for (int64_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(y.select(0, 1).to_vector<double>()[k], want1.to_vector<double>()[k], 1e-12);
    EXPECT_NEAR(y.select(0, 4).to_vector<double>()[k], want4.to_vector<double>()[k], 1e-12);
  }
}

ModelConfig graph_model(const std::string& name) {
  ModelConfig c;
  c.name = name;
  c.options["sizes"] = std::string("6,5,3");
  c.options["dropout"] = 0.0;
  c.options["dtype"] = std::string("f64");
  return c;
}

TEST(GraphNet, ZooGcnAndSageGradcheckF64) {
  for (const std::string name : {"gcn", "sage"}) {
    ModulePtr m = make_model(graph_model(name));
    auto* net = dynamic_cast<GraphNet*>(m.get());
    ASSERT_NE(net, nullptr) << name;
    net->set_graph(small_graph());
    EXPECT_GRADCHECK_OK(gradcheck_module(*net, Variable(randn64({5, 6}, 9), true)));
    EXPECT_GRADCHECK_OK(gradcheck_module(*net, Variable(small_features())));
    const ModelInput in = model_input(graph_model(name));
    EXPECT_EQ(in.kind, InputKind::kGraph);
    EXPECT_EQ(in.example, (Shape{6}));
    EXPECT_EQ(in.classes, 3);
  }
}

TEST(GraphNet, RefusesForwardWithoutAGraphAndFeaturesOfTheWrongShape) {
  ModulePtr m = make_model(graph_model("gcn"));
  expect_all(error_of([&] { m->forward(Variable(small_features())); }), {"GraphNet (gcn)", "set_graph"});
  dynamic_cast<GraphNet&>(*m).set_graph(small_graph());
  expect_all(error_of([&] {
               m->forward(Variable(randn64({4, 6}, 1)));
             }),
             {"GCNConv", "node features", "[5, 6]", "[4, 6]"});
}

// Features whose dense form would take 2^33 entries (32 GiB of f32) train
// through a GCN and the zoo's MLP: every product reads the CSR as it is.
TEST(GraphNet, SparseFeaturesAreNeverDensified) {
  const int64_t nodes = 1 << 13, vocabulary = 1 << 20;
  std::vector<int32_t> crow{0}, col;
  std::vector<float> v;
  for (int64_t i = 0; i < nodes; ++i) {
    for (int64_t k = 0; k < 3; ++k) {
      col.push_back(static_cast<int32_t>((i * 7919 + k * 104729) % vocabulary));
      v.push_back(1.0f);
    }
    std::sort(col.end() - 3, col.end());
    crow.push_back(static_cast<int32_t>(col.size()));
  }
  const Tensor x = sparse_csr(from_vector(crow), from_vector(col), from_vector(v), {nodes, vocabulary});
  std::vector<int32_t> acrow{0}, acol;  // a ring
  for (int64_t i = 0; i < nodes; ++i) {
    const int32_t a = static_cast<int32_t>((i + nodes - 1) % nodes), b = static_cast<int32_t>((i + 1) % nodes);
    acol.push_back(std::min(a, b));
    acol.push_back(std::max(a, b));
    acrow.push_back(static_cast<int32_t>(acol.size()));
  }
  const Tensor ring = sparse_csr(from_vector(acrow), from_vector(acol),
                                 from_vector(std::vector<float>(acol.size(), 1.0f)), {nodes, nodes});
  const Tensor targets = zeros({nodes}, DType::kI64);
  for (const std::string name : {"gcn", "sage", "mlp"}) {
    ModelConfig c;
    c.name = name;
    c.options["sizes"] = str_cat(vocabulary, ",2,2");
    ModulePtr m = make_model(c);
    if (auto* net = dynamic_cast<GraphNet*>(m.get())) net->set_graph(ring);
    const Variable loss = cross_entropy(m->forward(Variable(x)), targets);
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.value().item())) << name;
    for (const auto& [pname, p] : m->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name << " " << pname;
  }
}

}  // namespace
}  // namespace coppice
