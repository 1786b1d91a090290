#!/usr/bin/env bash
# Packs what tools/device/run_gpt.sh needs into .devq (ignored by git; under
# the device tool's 64 MiB): the trainer and bench (built here with CUDA,
# stripped, one zstd archive; the demo too, and GPT_PACK_TESTS' test
# binaries), the Linux documentation corpus the GPT jobs read (absent on the
# GPU machine), and the Python peers.
#
# GPT_PACK_LITE=1: only the corpus and the Python peers, into .devq_lite (a
# few MiB), for a call that carries build_devbin.sh's first part as well
# (run_gpt.sh then uses its .devbin/ binaries; GPT_PACK=.devq_lite).
#
# GPT_PACK_DATA=fashion_mnist: Fashion-MNIST (30 MiB, also absent on the GPU
# machine) in place of the corpus and only the trainer, for `run_gpt.sh
# train` of the image jobs (lenet5_*, cnn_*).
#
# GPT_PACK_BASE=REV: also bench as built at REV (bin/bench_base), for
# `run_gpt.sh ab`, which alternates the two in one call. The work tree is
# moved to REV for that build and back (it must be clean), so Bazel
# recompiles only what differs; the two binaries share most of their bytes,
# which the archive's long zstd window finds (a bench alone is about 13 MiB).
#
# GPT_PACK_BASE_BIN=FILE: a bench built earlier, as bin/bench_base, in place of
# GPT_PACK_BASE's build (copy bazel-bin/tools/bench/bench aside before a change
# that rebuilds much, such as one to tensor/backend.h, so that the base costs
# no second build).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ${GPT_PACK_LITE:-0} == 1 ]]; then
  rm -rf .devq_lite && mkdir -p .devq_lite
  tar czf .devq_lite/corpus.tgz -C /usr/share/doc/linux-doc-6.1/html _sources
  cp tools/bench/*.py tools/device/eval_gpt_torch.py tools/device/read_checkpoint_torch.py .devq_lite/
  du -sh .devq_lite
  exit 0
fi
tools/setup >/dev/null
# GPT_PACK_TESTS: test targets to carry too (bin/tests; run_gpt.sh tests
# runs them), e.g. the few a change touched, re-run beside the step.
read -r -a tests <<< "${GPT_PACK_TESTS:-}"
bazel build --define=cuda=1 //tools/trainer:trainer //tools/bench:bench //tools/demo:mlp_demo "${tests[@]}"
bin=$(bazel info --define=cuda=1 bazel-bin)
rm -rf .devq && mkdir -p .devq/bin/tests
fashion=0
[[ ${GPT_PACK_DATA:-corpus} == fashion_mnist ]] && fashion=1
cp "$bin/tools/trainer/trainer" .devq/bin/
[[ $fashion == 1 ]] || cp "$bin/tools/bench/bench" "$bin/tools/demo/mlp_demo" .devq/bin/
if [[ -n ${GPT_PACK_BASE:-} ]]; then
  git diff --quiet HEAD && [[ -z $(git ls-files --others --exclude-standard) ]] ||
    { echo "pack_gpt.sh: GPT_PACK_BASE needs a clean work tree (commit or stash first)" >&2; exit 1; }
  here=$(git symbolic-ref -q --short HEAD || git rev-parse HEAD)
  trap 'git checkout -q "$here"' EXIT
  git checkout -q --detach "$GPT_PACK_BASE"
  bazel build --define=cuda=1 //tools/bench:bench
  cp "$bin/tools/bench/bench" .devq/bin/bench_base
  git checkout -q "$here"
  trap - EXIT
fi
if [[ -n ${GPT_PACK_BASE_BIN:-} ]]; then
  cp "$GPT_PACK_BASE_BIN" .devq/bin/bench_base
fi
for t in "${tests[@]}"; do
  path=${t#//}; path=${path/://}
  cp "$bin/$path" ".devq/bin/tests/$(echo "${t#//tests/}" | tr '/:' '__')"
done
chmod -R u+w .devq/bin && find .devq/bin -maxdepth 1 -type f -exec strip --strip-unneeded {} +
[[ ${#tests[@]} == 0 ]] || strip --strip-unneeded .devq/bin/tests/*
(cd .devq && tar cf - bin | zstd -q -T0 -12 --long=31 -f -o bins.tar.zst && rm -rf bin)
mkdir -p .devq/zstd && cp /usr/bin/zstd .devq/zstd/
for lib in $(ldd /usr/bin/zstd | awk '/=> \//{print $3}' | grep -E 'libzstd|liblzma|liblz4'); do cp "$lib" .devq/zstd/; done
if [[ $fashion == 1 ]]; then
  tar cf .devq/fashion_mnist.tar -C /usr/share/datasets fashion-mnist  # already gzip files
else
  tar czf .devq/corpus.tgz -C /usr/share/doc/linux-doc-6.1/html _sources
fi
cp tools/bench/*.py tools/device/eval_gpt_torch.py tools/device/read_checkpoint_torch.py .devq/
du -sh .devq
