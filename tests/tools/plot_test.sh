#!/usr/bin/env bash
# tools/plot: draws a metrics file; never replaces its input; a write that
# fails (a full device, a missing directory) exits 1 and leaves no partial
# picture behind.
set -u
plot="${1:?usage: plot_test.sh path/to/tools/plot}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/plot_test"
rm -rf "$tmp" && mkdir -p "$tmp"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
m="$tmp/m.jsonl"
printf '%s\n' '{"kind":"train","step":1,"loss":1.0,"accuracy":0.5,"density":{"fc1.weight":0.5}}' \
  '{"kind":"train","step":2,"loss":0.8,"accuracy":0.6,"density":{"fc1.weight":0.5}}' \
  '{"kind":"eval","step":2,"loss":0.9,"accuracy":0.55}' >"$m"
before=$(md5sum <"$m")

"$plot" "$m" "$tmp/out.png" >"$tmp/log" 2>&1
check "draws a picture" [ $? -eq 0 -a -s "$tmp/out.png" ]
check "the picture is a PNG" [ "$(head -c 4 "$tmp/out.png" | tail -c 3)" = "PNG" ]

"$plot" "$m" "$m" >"$tmp/log" 2>&1
check "its input as the output is refused (exit 2)" [ $? -eq 2 ]
check "the input is unchanged" [ "$(md5sum <"$m")" = "$before" ]
check "the refusal names the input" grep -q "is the metrics file it reads" "$tmp/log"

"$plot" "$m" /dev/full >"$tmp/log" 2>&1
check "a full device fails (exit 1)" [ $? -eq 1 ]
check "a full device is still a device" [ -c /dev/full ]
check "the failure names the file" grep -q "cannot write '/dev/full'" "$tmp/log"

"$plot" "$m" "$tmp/missing/out.png" >"$tmp/log" 2>&1
check "a missing directory fails (exit 1)" [ $? -eq 1 ]
check "no temporary file left" [ -z "$(find "$tmp" -name '*.tmp.*')" ]

checks_done plot_test
