# Fills the disk through a file in the working directory. Expected: "output limit" (RLIMIT_FSIZE ->
# SIGXFSZ); in the namespace modes the working dir is also a size-capped tmpfs.
chunk = b"x" * (1024 * 1024)
with open("fill.bin", "wb") as f:
    while True:
        f.write(chunk)
        f.flush()
