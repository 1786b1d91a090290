// The small training components the checkpoint harness loads into and the
// corpus generator saves from (tests/fuzz/BUILD): an MLP 4-6-3 whose weights
// are CSR at half density, with one optimizer step taken so there is state,
// and a mask updater over the sparse weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "optim/adam.h"
#include "optim/mask_updater.h"
#include "optim/sgd.h"
#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"

namespace coppice::fuzz {

enum class OptimizerKind { kSgd, kAdam };

struct CheckpointComponents {
  std::shared_ptr<MLP> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<MaskUpdater> updater;  // null: a job without mask updates
};

// Built from `seed`; with `step`, one SGD or Adam step is taken on a fixed
// batch so that the optimizer has state to save.
inline CheckpointComponents make_checkpoint_components(OptimizerKind kind, bool with_updater, uint64_t seed,
                                                       bool step) {
  CheckpointComponents c;
  c.model = testing_train::make_mlp({4, 6, 3}, seed);
  const std::vector<std::string> sparse = testing_train::sparsify_weights(*c.model, 0.5, seed);
  name_parameters(*c.model);
  if (kind == OptimizerKind::kSgd) {
    c.optimizer = std::make_unique<Sgd>(c.model->parameters(), SgdOptions{0.1, 0.9});
  } else {
    c.optimizer = std::make_unique<Adam>(c.model->parameters(), AdamOptions{});
  }
  if (with_updater) {
    MaskUpdaterConfig u;
    u.end_step = 100;
    u.interval = 10;
    u.growth = "random";
    c.updater = std::make_unique<MaskUpdater>(u);
    for (const std::string& n : sparse) c.updater->add_layer(n, c.model->parameter(n).value());
  }
  if (step) {
    const Tensor x = from_vector(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f, 1.0f, 0.0f, -0.5f, 3.0f}, {2, 4});
    Variable loss = sum((*c.model)(Variable(x)));
    loss.backward();
    c.optimizer->step();
  }
  return c;
}

}  // namespace coppice::fuzz
