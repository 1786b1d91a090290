# What the shell tests share; source it first (`. "$(dirname "$0")/../util/check.sh"`,
# with //tests/util:check.sh in the sh_test's data).
#
#   check NAME COMMAND...   runs COMMAND; prints "PASS NAME" or "FAIL NAME" and
#                           counts the failure. A failure returns 1, so that
#                           `check ... || cat LOG` shows why (no test here runs
#                           under set -e).
#   checks_done [PREFIX]    the count of failures ("PREFIX: N failed"), and a
#                           non-zero status if there was one: a test's last line.
fails=0
check() {
  local name="$1"
  shift
  if "$@"; then
    echo "PASS $name"
  else
    echo "FAIL $name"
    fails=$((fails + 1))
    return 1
  fi
}
checks_done() {
  echo "${1:+$1: }$fails failed"
  [ "$fails" -eq 0 ]
}
