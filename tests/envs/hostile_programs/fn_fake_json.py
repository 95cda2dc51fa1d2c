# Function mode: replaces json.dumps inside the sandbox so that the "result" is 100,000 opening and
# closing brackets. Expected: "runtime error" (the caller parses with bounded depth).
import json

json.dumps = lambda *a, **k: "[" * 100000 + "]" * 100000


def solve(x):
    return x
