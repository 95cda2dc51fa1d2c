# Function mode: lifts Python's int-to-text limit inside the sandbox and returns a 5,000-digit
# integer, which the caller's json.loads refuses with a bare ValueError. Expected: "runtime error".
import sys

if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)


def solve(x):
    return 7 * 10**4999
