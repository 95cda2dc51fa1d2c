# Uses no CPU but never finishes. Expected: "time limit" by the wall-clock deadline (process group killed).
import time

time.sleep(10**6)
