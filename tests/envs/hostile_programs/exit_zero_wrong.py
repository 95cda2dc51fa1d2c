# sys.exit(0) with a wrong answer. Expected: "wrong answer" (the verdict comes from the output,
# a zero exit status proves nothing).
import sys

print("not the answer")
sys.exit(0)
