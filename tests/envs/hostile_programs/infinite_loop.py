# Burns CPU forever. Expected: "time limit" (RLIMIT_CPU -> SIGXCPU, or the wall deadline).
while True:
    pass
