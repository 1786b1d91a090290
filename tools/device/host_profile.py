#!/usr/bin/env python3
"""Reads tools/device/host_sampler.cc's samples: host time by function.

    tools/device/host_profile.py SAMPLES [--module NAME=UNSTRIPPED ...] [--top N]
        [--under FUNCTION]

Each sample is one call stack, leaf first, as MODULE+OFFSET. A module given
with --module (its file name on the machine that ran, then a local unstripped
copy of the same build) is symbolized with addr2line; any other frame is
named by its module alone. Prints, as shares of all samples: the functions
the CPU was in (exclusive), the functions on the stack (inclusive), and the
modules (inclusive). --under keeps only the samples whose stack holds a
function whose name contains FUNCTION.
"""
import argparse
import collections
import os
import subprocess
import sys


def parse(path):
    """The samples as lists of (module path, offset), leaf first, the sampler's own frames removed."""
    samples = []
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        frames = []
        for word in line.split():
            module, _, offset = word.rpartition("+0x")
            frames.append((module, int(offset, 16)))
        # The signal handler, then the kernel's return trampoline in libc.
        if frames and os.path.basename(frames[0][0]).startswith("host_sampler"):
            frames.pop(0)
            if frames and os.path.basename(frames[0][0]).startswith("libc.so"):
                frames.pop(0)
        samples.append(frames)
    return samples


def symbolizer(modules):
    """A function (module path, offset) -> name, addr2line over the unstripped copies."""
    names = {}

    def load(module, offsets):
        local = modules[os.path.basename(module)]
        out = subprocess.run(["addr2line", "-f", "-C", "-e", local] + [hex(o) for o in offsets],
                             capture_output=True, text=True, check=True).stdout.splitlines()
        for i, o in enumerate(offsets):
            names[(module, o)] = out[2 * i]

    def name(frame, wanted):
        module, offset = frame
        base = os.path.basename(module)
        if base not in modules:
            return f"[{base}]"
        if frame not in names:
            load(module, sorted({o for m, o in wanted if m == module and (m, o) not in names}))
        return names[frame]

    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("samples")
    ap.add_argument("--module", action="append", default=[], metavar="NAME=UNSTRIPPED")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--under", default="")
    args = ap.parse_args()
    modules = dict(m.split("=", 1) for m in args.module)
    samples = parse(args.samples)
    wanted = {f for s in samples for f in s}
    name = symbolizer(modules)
    named = [[name(f, wanted) for f in s] for s in samples]
    if args.under:
        named = [s for s in named if any(args.under in n for n in s)]
    total = len(named)
    if total == 0:
        sys.exit("host_profile: no samples")
    exclusive = collections.Counter(s[0] for s in named if s)
    inclusive = collections.Counter(n for s in named for n in set(s))
    by_module = collections.Counter(m for s in samples for m in {os.path.basename(f[0]) for f in s})
    print(f"{total} samples" + (f" with '{args.under}' on the stack" if args.under else ""))
    for title, counts in (("exclusive", exclusive), ("inclusive", inclusive)):
        print(f"\n{title}:")
        for n, c in counts.most_common(args.top):
            print(f"  {100.0 * c / total:5.1f}%  {n[:160]}")
    if not args.under:
        print("\nmodules (inclusive):")
        for n, c in by_module.most_common(15):
            print(f"  {100.0 * c / total:5.1f}%  {n}")


if __name__ == "__main__":
    main()
