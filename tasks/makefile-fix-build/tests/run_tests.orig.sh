#!/bin/bash
# Runs bin/calc on known inputs and compares with the expected output.
cd "$(dirname "$0")/.." || exit 1
fail=0
check() {  # check EXPECTED ARGS...
  local want=$1; shift
  local got
  got=$(./bin/calc "$@" 2>&1)
  if [ "$got" = "$want" ]; then echo "ok   calc $*"; else echo "FAIL calc $*: got '$got', want '$want'"; fail=1; fi
}
check 5.000 hyp 3 4
check 13.000 hyp 5 12
check 6 gcd 12 18
check 1 gcd 17 5
check 3628800 fact 10
check 1 fact 0
[ "$fail" -eq 0 ] && echo "all tests passed"
exit "$fail"
