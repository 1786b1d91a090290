// A sparsifier written outside Coppice and registered by name: "top_per_row"
// keeps the k entries of largest |x| in every row, so every output unit keeps
// exactly k inputs. A job's rule then names it (sparsity.rules[].sparsifier:
// {name: top_per_row, k: 8}) to choose a weight's initial pattern.
#include <iostream>
#include <memory>
#include <string>

#include "sparsifiers/mask_ops.h"
#include "sparsifiers/registry.h"
#include "sparsifiers/sparsifier.h"
#include "tensor/ops.h"
#include "train/config.h"
#include "train/job.h"
#include "train/summary.h"

using namespace coppice;

class TopPerRow : public Sparsifier {
 public:
  explicit TopPerRow(int64_t k) : k_(k) {}
  std::string describe() const override { return "top_per_row(k=" + std::to_string(k_) + ")"; }
  SparsifierKind kind() const override { return SparsifierKind::kBlocking; }
  std::string shape_mismatch(const Shape& shape) const override {
    return shape.size() == 2 && shape[1] >= k_ ? "" : describe() + ": needs a matrix with at least k columns";
  }
  // One group per row: the n:m selection with m = the row's length.
  Tensor keep_mask(const Tensor& x, const SparsifyContext&) const override {
    return sparsify::nm_mask(x, k_, x.size(1), -1, describe());
  }

 private:
  int64_t k_;
};

int main() {
  register_sparsifier("top_per_row", [](const SparsifierSpec& spec) {
    SpecParams p(spec);
    const int64_t k = p.get_int("k");
    p.finish();  // refuses parameters it does not take, naming them
    return std::make_shared<TopPerRow>(k);
  });
  const std::string yaml = R"(
name: custom_sparsifier
seed: 2
device: cpu
model: {name: mlp, options: {sizes: [32, 64, 4]}}
data:
  dataset: synthetic
  batch_size: 32
  synthetic: {examples: 1024, test_examples: 256, features: 32, classes: 4, center_scale: 1.0, spread: 1.0}
sparsity:
  rules: [{name: fc1.weight, format: csr, sparsifier: {name: top_per_row, k: 8}}]
mask_update: {method: static}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
training: {steps: 200}
logging: {progress: false}
)";
  absl::StatusOr<ValidatedJob> job = parse_validated_job(yaml);
  if (!job.ok()) {
    std::cerr << job.status().message() << "\n";
    return 2;
  }
  const TrainingSummary s = run_job(std::move(*job));
  std::cout << format_summary(s);
  double density = 0;
  for (const LayerStats& l : s.model.layers)
    if (l.name == "fc1.weight") density = l.density;
  // 8 of 32 inputs per row.
  return density == 0.25 && s.test && s.test->accuracy > 0.8 ? 0 : 1;
}
