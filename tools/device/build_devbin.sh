#!/usr/bin/env bash
# Builds, with CUDA, everything the GPU suite runs and packs it into
# .devbin_pack/devbin.tar.zst and .devbin_pack2/devbin.tar.zst (ignored by
# git; DEVBIN_PARTS parts, default 2), so that each fits one device call's
# carry (../shared/DEVICE.md):  device run, carry [".devbin_pack"], command
#   tools/device/run_gpu_suite.sh
# then carry [".devbin_pack2"], command
#   DEVBIN_PACK=.devbin_pack2 tools/device/run_gpu_suite.sh
# or, on the 2-GPU kind (nvidia-h200-x2), the data-parallel checks and benchmark:
#   tools/device/run_multi_gpu.sh
# or the training-step benchmark beside PyTorch (bench train, torch_train.py):
#   tools/device/run_train_bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/setup >/dev/null
# COPPICE_BAZEL_OUTPUT_BASE reuses a warm output base (a developer's own).
bazel=(bazel ${COPPICE_BAZEL_OUTPUT_BASE:+--output_base=$COPPICE_BAZEL_OUTPUT_BASE})
# The tests that exercise a GPU: every cc_test in a cuda/ folder of tests/ and
# any test whose source checks for a CUDA device (one cc_test per *_test.cc,
# named after the file). CPU-only tests run in CI; carrying them would only
# add bytes.
mapfile -t tests < <({ "${bazel[@]}" query 'kind(cc_test, //tests/...)' 2>/dev/null | grep '/cuda:'
  grep -rlE 'cuda_available|SKIP_WITHOUT_CUDA' tests --include='*_test.cc' |
    sed -E 's|^(.*)/([^/]+)\.cc$|//\1:\2|'; } | sort -u)
"${bazel[@]}" build --define=cuda=1 "${tests[@]}" //tools/bench:bench //tools/demo:mlp_demo //tools/trainer:trainer
bin=$("${bazel[@]}" info --define=cuda=1 bazel-bin)
rm -rf .devbin && mkdir -p .devbin/tests
for t in "${tests[@]}"; do
  path=${t#//}; path=${path/://}
  [[ -x $bin/$path ]] && cp "$bin/$path" ".devbin/tests/$(echo "${t#//tests/}" | tr '/:' '__')"
done
# DEVBIN_TESTS_ONLY=1: the test binaries and scripts alone, when the whole
# pack would pass the device tool's 64 MiB with the tree (it reached 61 MiB
# at 2fb3f2e); the demo, trainer and bench then come with pack_gpt.sh's .devq
# (run_gpt.sh tests runs the demo and the suite's trainer jobs).
if [[ ${DEVBIN_TESTS_ONLY:-0} != 1 ]]; then
  cp $bin/tools/bench/bench $bin/tools/demo/mlp_demo $bin/tools/trainer/trainer .devbin/
fi
# eval_gpt_torch.py imports read_checkpoint_torch.py from beside itself.
cp tools/bench/*.py tools/device/run_gpu_suite.sh tools/device/gpu_smoke.yaml tools/device/gpu_smoke_bsr.yaml \
  tools/device/read_checkpoint_torch.py tools/device/eval_gpt_torch.py .devbin/
# The multi-GPU run (tools/device/run_multi_gpu.sh): the rank launcher, its
# trainer job, and the script itself (torch_ddp.py and dp_compare.py came with
# tools/bench/*.py).
cp tools/launch .devbin/launch
cp tools/device/run_multi_gpu.sh tools/device/dp_smoke.yaml .devbin/
# The training-step run (tools/device/run_train_bench.sh): bench, torch_train.py
# and train_compare.py are in already; it reads the jobs from configs/ of the tree.
cp tools/device/run_train_bench.sh .devbin/
# Nothing beyond glibc, libstdc++, libgcc and the CUDA libraries may be needed there.
tools=$(ls .devbin/bench .devbin/mlp_demo .devbin/trainer 2>/dev/null || true)
bad=$(ldd .devbin/tests/* $tools | awk '/=>/{print $1}' | sort -u |
      grep -vE '^(linux-vdso|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|ld-linux|libcudart|libcublas|libcublasLt|libcusparse|libnvJitLink|libnccl)' || true)
if [[ -n "$bad" ]]; then echo "build_devbin: unexpected shared libraries: $bad" >&2; exit 1; fi
# Symbols stripped: the device only runs them, and the pack must stay under
# the device tool's 64 MiB with the working tree (they add about 6 MB).
strip --strip-unneeded .devbin/tests/* $tools
# The pack in DEVBIN_PARTS parts (default 2), each carried by its own call:
# .devbin_pack (the demo, trainer and bench, which the other run_*.sh scripts
# read from there, and every other test binary) and .devbin_pack2, ...
# (DEVBIN_PACK=.devbin_pack2 tools/device/run_gpu_suite.sh). The whole suite
# in one archive passed the 64 MiB with the tree at 59 MB (7dd0424). Test
# binaries are dealt to the parts largest first, in turn.
parts=${DEVBIN_PARTS:-2}
pack_dir() { if [[ $1 == 1 ]]; then echo .devbin_pack; else echo ".devbin_pack$1"; fi; }
rm -rf .devbin_pack .devbin_pack[0-9]* .devbin_parts
mkdir -p .devbin_parts
i=0
for t in $(ls -S .devbin/tests); do
  part=$((i % parts + 1)); i=$((i + 1))
  mkdir -p ".devbin_parts/$part/.devbin/tests"
  mv ".devbin/tests/$t" ".devbin_parts/$part/.devbin/tests/"
done
for part in $(seq 1 "$parts"); do
  stage=".devbin_parts/$part/.devbin"
  mkdir -p "$stage/tests"
  if [[ $part == 1 ]]; then
    find .devbin -maxdepth 1 -type f -exec cp {} "$stage/" \;  # the tools and scripts
  else
    find .devbin -maxdepth 1 -type f ! -name bench ! -name trainer ! -name mlp_demo -exec cp {} "$stage/" \;
  fi
  dir=$(pack_dir "$part")
  mkdir -p "$dir/zstd"
  # Test binaries share most of their bytes (OpenBLAS, Abseil, our kernels):
  # one long-window zstd archive carries them well (level 19: about a quarter
  # smaller than level 12, for two more minutes of packing).
  (cd ".devbin_parts/$part" && tar cf - .devbin) | zstd -q -T0 -19 --long=31 -f -o "$dir/devbin.tar.zst"
  # The GPU machine may lack the zstd tool: carry ours with its libraries.
  cp /usr/bin/zstd "$dir/zstd/"
  for lib in $(ldd /usr/bin/zstd | awk '/=> \//{print $3}' | grep -E 'libzstd|liblzma|liblz4'); do cp "$lib" "$dir/zstd/"; done
  du -sh "$dir"
done
rm -rf .devbin .devbin_parts
