# Floods stdout. Expected: "output limit" (the parent stops reading at the cap and kills the run).
import sys

line = "A" * 65536 + "\n"
while True:
    sys.stdout.write(line)
