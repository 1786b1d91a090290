#include "train/loop.h"

#include "autograd/no_grad.h"
#include "distributed/replica_sync.h"
#include "train/trainer.h"

namespace coppice {

TrainingSummary run_training(TrainComponents& components) {
  Trainer trainer(components);  // resumes, when components.resume says so
  for (int64_t t = trainer.first_step(); t < trainer.stop_step(); ++t) {
    trainer.begin_step(t);
    trainer.forward_backward();
    trainer.synchronize();
    trainer.step();
    trainer.update_sparsity();
    trainer.record();
    trainer.log();
    trainer.evaluate();
    trainer.checkpoint();
    trainer.end_step();
  }
  return trainer.finish();
}

void replicate_parameters(Module& model, Communicator& comm) {
  NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor root = broadcast_any(comm, p.value(), 0, name);
    if (!root.is_same(p.value())) model.set_parameter(name, Variable(root, p.requires_grad(), name));
  }
}

}  // namespace coppice
