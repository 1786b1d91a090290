"""Compiles .cu sources with nvcc into a cc_library (docs/architecture.md, Build).

nvcc is run once per source, producing position-independent host objects with
sm_80 and sm_90 machine code plus compute_90 PTX, so the result runs on Ampere
and Hopper and JIT-compiles on anything newer. A library may name its own
`gencode` instead: Hopper's arch-specific instructions (wgmma, setmaxnreg)
need sm_90a, whose code runs on compute capability 9.0 alone, so such a
library's kernels are built for it only and its callers check the device. The objects then go into a
normal cc_library, which links @cuda//:cudart: the CUDA runtime statically,
and forwarders that find cuBLAS, cuBLASLt and cuSPARSE by name at run time
(third_party/cuda.BUILD, tensor/cuda/lazy/library.h).
"""

NVCC = "/usr/local/cuda/bin/nvcc"

_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def _cuda_objects_impl(ctx):
    compilation = cc_common.merge_cc_infos(
        cc_infos = [d[CcInfo] for d in ctx.attr.deps],
    ).compilation_context
    inputs = depset(ctx.files.hdrs, transitive = [compilation.headers])
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_cu_objs/%s/%s.o" % (ctx.label.name, src.basename.rsplit(".", 1)[0]))
        args = ctx.actions.args()
        args.add_all(["-c", src.path, "-o", obj.path])
        args.add_all(["-std=c++17", "-O3", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr"])
        args.add_all(["-Xcudafe", "--diag_suppress=esa_on_defaulted_function_ignored"])
        args.add_all(ctx.attr.gencode or _GENCODE)
        args.add_all(["-I.", "-I" + ctx.bin_dir.path, "-I" + ctx.genfiles_dir.path])
        args.add_all(compilation.includes, before_each = "-I")
        args.add_all(compilation.quote_includes, before_each = "-I")
        args.add_all(compilation.system_includes, before_each = "-isystem")
        args.add_all(compilation.defines, format_each = "-D%s")
        args.add_all(ctx.attr.copts)
        ctx.actions.run(
            executable = NVCC,
            arguments = [args],
            inputs = depset([src], transitive = [inputs]),
            outputs = [obj],
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
            env = {"PATH": "/usr/local/cuda/bin:/usr/bin:/bin"},
        )
        objects.append(obj)
    return [DefaultInfo(files = depset(objects))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "gencode": attr.string_list(),
    },
)

def cuda_only():
    """target_compatible_with value that skips a target when CUDA is off."""
    return select({
        "//build_defs:cuda_enabled": [],
        "//conditions:default": ["//build_defs:cuda_toolkit_missing"],
    })

def if_cuda(with_cuda, without_cuda = []):
    return select({
        "//build_defs:cuda_enabled": with_cuda,
        "//conditions:default": without_cuda,
    })

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], cc_srcs = [], gencode = [], **kwargs):
    """A cc_library whose .cu `srcs` are compiled by nvcc.

    `cc_srcs` are host C++ sources that call the CUDA runtime or libraries; they
    are compiled by the normal C++ toolchain. The target exists only when CUDA
    is on (see cuda_only()). `gencode`: nvcc's -gencode flags instead of the
    default set (see the top of this file).
    """
    _cuda_objects(
        name = name + "_nvcc",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cuda_headers"],
        copts = copts,
        gencode = gencode,
        target_compatible_with = cuda_only(),
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_nvcc"] + cc_srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        target_compatible_with = cuda_only(),
        **kwargs
    )
