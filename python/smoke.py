"""tools/wheel --smoke: LeNet-300-100 at 90 % with RigL, from Python, through
the installed wheel (the job's own file; a callback watches the loss)."""
import sys

import coppice

losses = []
summary = coppice.train(sys.argv[1], overrides=["training.epochs=2", "mask_update.end_step=600"],
                        callback=lambda step, loss: losses.append(loss) is None)
print(f"trained {summary['final_step']} steps, test accuracy {summary['test_accuracy']:.4f}, "
      f"densities {summary['density']}")
assert summary["final_step"] == len(losses) > 0
assert summary["test_accuracy"] > 0.8, summary["text"]
print("smoke: ok")
