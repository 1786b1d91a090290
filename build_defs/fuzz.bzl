"""libFuzzer harnesses that are also plain regression tests (tests/fuzz/BUILD).

A harness is a source defining LLVMFuzzerTestOneInput, with a seed corpus in
corpus/<name>/ beside its BUILD file. fuzz_test(name, ...) makes:

  <name>_replay_test  every build (gcc included): a plain cc_test that feeds
                      each corpus file to the harness once (replay_main), so
                      tools/test replays the corpora on every build;
  <name>_fuzzer       the fuzz configuration only (--config=fuzz, run by
                      tools/fuzz in its own output base): the libFuzzer binary;
  <name>_fuzz_test    the fuzz configuration only: the fuzzer run for
                      `seconds` on its corpus (run_fuzzer.sh); tagged
                      fuzz_pass, which tools/test's fuzz pass runs (and
                      builds only those: --build_tests_only).

The fuzz-only targets name a constraint no platform has outside the fuzz
configuration, so `bazel test //...` with gcc skips them (as cuda_only()).
"""

def fuzz_only():
    """target_compatible_with value that skips a target outside the fuzz configuration."""
    return select({
        "//build_defs:fuzz_enabled": [],
        "//conditions:default": ["//build_defs:fuzz_build_missing"],
    })

def fuzz_test(name, srcs, deps = [], data = [], dictionary = None, seconds = 5, size = "small"):
    """A harness `srcs` (LLVMFuzzerTestOneInput) over corpus/<name>/; see the file comment.

    `dictionary`: a libFuzzer dictionary (tokens the input format uses).
    `data`: files the harness reads at run time.
    """
    corpus_dir = native.package_name() + "/corpus/" + name
    corpus = native.glob(["corpus/%s/*" % name])
    if not corpus:
        fail("fuzz_test %s: no seed corpus in %s" % (name, corpus_dir))

    native.cc_test(
        name = name + "_replay_test",
        size = size,
        srcs = srcs,
        args = [corpus_dir],
        data = corpus + data,
        deps = deps + ["//tests/fuzz:replay_main"],
    )

    native.cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        srcs = srcs,
        linkopts = ["-fsanitize=fuzzer"],
        deps = deps,
        target_compatible_with = fuzz_only(),
    )

    flags = []
    dict_data = []
    if dictionary:
        flags.append("-dict=$(rootpath %s)" % dictionary)
        dict_data.append(dictionary)
    native.sh_test(
        name = name + "_fuzz_test",
        size = size,
        srcs = ["//tests/fuzz:run_fuzzer.sh"],
        args = ["$(rootpath :%s_fuzzer)" % name, corpus_dir, str(seconds), "-"] + flags,
        data = [":" + name + "_fuzzer"] + corpus + data + dict_data,
        tags = ["fuzz_pass"],
        target_compatible_with = fuzz_only(),
    )
