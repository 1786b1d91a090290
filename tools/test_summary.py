#!/usr/bin/env python3
"""Tallies test cases from a `bazel test` run for tools/test.

With --log and --testlogs: reads the per-target status lines of the log and
each target's GoogleTest XML report (one per shard of a sharded test), and
prints "passed failed skipped" for that run. A target that failed to build,
timed out or left no report counts as one failed case. With --total FILE:
sums such lines and prints the closing line "N passed, N failed, N skipped";
exits 1 if anything failed.
"""
import argparse
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

# "(cached)", or "(1/2 cached)" for a sharded test some of whose shards were cached.
STATUS = re.compile(r"^(//\S+)\s+(?:\((?:\d+/\d+ )?cached\)\s+)?(PASSED|FAILED TO BUILD|FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE|SKIPPED)\b")


def count_xml(path):
    passed = failed = skipped = 0
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def tally_run(log, testlogs):
    passed = failed = skipped = 0
    build_broke = False
    with open(log, errors="replace") as f:
        for line in f:
            if "FAILED: Build did NOT complete successfully" in line:
                build_broke = True
            m = STATUS.match(line.strip())
            if not m:
                continue
            label, status = m.groups()
            if status == "SKIPPED":  # incompatible target (e.g. CUDA off): not a test case
                continue
            pkg, _, name = label[2:].partition(":")
            # A sharded test (shard_count) has a report per shard.
            xmls = [os.path.join(testlogs, pkg, name, "test.xml")]
            xmls += sorted(glob.glob(os.path.join(testlogs, pkg, name, "shard_*_of_*", "test.xml")))
            xmls = [x for x in xmls if os.path.exists(x)]
            if status in ("PASSED", "FAILED", "FLAKY") and xmls:
                p = fl = s = 0
                for xml in xmls:
                    try:
                        dp, dfl, ds = count_xml(xml)
                    except ET.ParseError:
                        dp, dfl, ds = 0, 1, 0
                    p, fl, s = p + dp, fl + dfl, s + ds
                if status == "FAILED" and fl == 0:
                    fl = 1  # crashed after writing a partial report
                passed, failed, skipped = passed + p, failed + fl, skipped + s
            else:
                failed += 1
    if build_broke and failed == 0:
        failed = 1
    return passed, failed, skipped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log")
    ap.add_argument("--testlogs")
    ap.add_argument("--total")
    args = ap.parse_args()
    if args.total:
        totals = [0, 0, 0]
        with open(args.total) as f:
            for line in f:
                for i, v in enumerate(line.split()):
                    totals[i] += int(v)
        print(f"{totals[0]} passed, {totals[1]} failed, {totals[2]} skipped")
        return 1 if totals[1] else 0
    print(*tally_run(args.log, args.testlogs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
