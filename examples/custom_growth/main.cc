// A growth policy written outside Coppice, registered by name and used from a
// YAML job (job.yaml: mask_update.growth: neighbour_gradient): RigL's
// dropping, but growth where |gradient| x |the neighbouring weights in the
// row| is largest, so new entries sit next to strong ones.
//
//   custom_growth job.yaml      prints the run's summary; exit 0 when it trained
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

#include "optim/growth.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "train/config.h"
#include "train/job.h"
#include "train/summary.h"

using namespace coppice;

class NeighbourGradient : public GrowthPolicy {
 public:
  std::string name() const override { return "neighbour_gradient"; }
  bool needs_dense_gradient() const override { return true; }
  std::vector<int64_t> grow(const GrowthInput& in) const override {
    // Scores on the host, for clarity: |g| times (|left| + |right| + a small
    // floor, so that a row with no stored neighbour still grows).
    // The dense gradient (growth_scores throws, naming the layer, for a block-format one).
    const std::vector<float> g =
        to_dense(in.growth_scores(name())).to(DType::kF32).to(Device::cpu()).to_vector<float>();
    const std::vector<float> w = to_dense(in.param).to(DType::kF32).to(Device::cpu()).to_vector<float>();
    const int64_t cols = in.param.size(1);
    std::vector<float> score(g.size());
    for (size_t p = 0; p < g.size(); ++p) {
      const int64_t c = static_cast<int64_t>(p) % cols;
      const float left = c > 0 ? std::fabs(w[p - 1]) : 0.0f, right = c + 1 < cols ? std::fabs(w[p + 1]) : 0.0f;
      score[p] = std::fabs(g[p]) * (left + right + 1e-3f);
    }
    return top_k_among(from_vector(score, in.param.shape()), *in.candidates, in.k, "neighbour_gradient");
  }
};

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: custom_growth JOB.yaml\n";
    return 2;
  }
  // Registered before the job is read: the loader checks the name.
  register_growth_policy("neighbour_gradient", [] { return std::make_shared<NeighbourGradient>(); });
  absl::StatusOr<ValidatedJob> job = load_validated_job(argv[1], {});
  if (!job.ok()) {
    std::cerr << job.status().message() << "\n";
    return 2;
  }
  const TrainingSummary s = run_job(std::move(*job));
  std::cout << format_summary(s);
  const bool updated = !s.mask_updates.empty() && s.mask_updates.front().grown.at("fc1.weight") > 0;
  return updated && s.test && s.test->accuracy > 0.8 ? 0 : 1;
}
