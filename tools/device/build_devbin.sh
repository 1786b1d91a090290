#!/usr/bin/env bash
# Builds, with CUDA, everything the GPU suite runs, and copies it into .devbin/
# (ignored by git) so that one device call can carry it (../shared/DEVICE.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/setup >/dev/null
mapfile -t tests < <(bazel query 'kind(cc_test, //tests/...)' 2>/dev/null)
bazel build --define=cuda=1 "${tests[@]}" //tools/bench:bench //tools/demo:mlp_demo
bin=$(bazel info --define=cuda=1 bazel-bin)
rm -rf .devbin && mkdir -p .devbin/tests
for t in "${tests[@]}"; do
  path=${t#//}; path=${path/://}
  [[ -x $bin/$path ]] && cp "$bin/$path" ".devbin/tests/$(echo "${t#//tests/}" | tr '/:' '__')"
done
cp $bin/tools/bench/bench $bin/tools/demo/mlp_demo .devbin/
cp tools/bench/*.py tools/device/run_gpu_suite.sh .devbin/
# Nothing beyond glibc, libstdc++, libgcc and the CUDA libraries may be needed there.
bad=$(ldd .devbin/tests/* .devbin/bench .devbin/mlp_demo | awk '/=>/{print $1}' | sort -u |
      grep -vE '^(linux-vdso|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|ld-linux|libcudart|libcublas|libcublasLt|libcusparse|libnvJitLink|libnccl)' || true)
if [[ -n "$bad" ]]; then echo "build_devbin: unexpected shared libraries: $bad" >&2; exit 1; fi
du -sh .devbin
