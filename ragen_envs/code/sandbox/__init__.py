"""Run untrusted Python programs: the security boundary of the project.

Model-written code never runs in the calling process. Every call of `run_program` (stdin/stdout
programs) or `run_function` (call one function with JSON arguments) starts a fresh process tree:

    env process ──Popen(new session, env={})──▶ unshare --mount --net --pid --ipc --uts --cgroup
        python -s -S sandbox/launch.py RUN_ID CONFIG_FD GO_FD STATUS_FD MODE  (configuration in a memfd)
        waiter: moved into the run's cgroups by the caller while it starts, then forks and waits
          └─ supervisor = PID 1: forks the program process, then reads the configuration, pivots
             into a minimal root, hands the program process its own values only, reaps, reports
               └─ program process: rlimits, fresh uid/gid, no_new_privs, seccomp filter, the model's code

The inside (`inside.py`, started by the tiny `launch.py` run by path) is a plain module, linted
and unit-tested like the rest; the caller side (`runner`) spawns it (`_spawn`), feeds stdin and
reads the bounded outputs while watching the limits (`_pump`), tears the run down (`_reap`) and
turns what it saw into a verdict (`_judge`).

The package (this module re-exports the public names of the others):

- `api`: the caller API, `run_program` and `run_function` (argument checks, then one run);
- `limits`: `Limits`, the resource limits of a run; `result`: `RunResult`, `VERDICTS`, the bounded
  reading of a function's JSON result and `outputs_match` (judging stdout);
- `runner`: one run from the caller's side (spawn, pump, reap, judge);
- `isolation`: which mode works here (probed once per process: `sandbox_isolation`), and the sweep
  of what the runs of a dead caller left behind;
- `inside` (the standard-library-only bootstrap run in the sandbox), `launch` (the script run by
  path that imports it), `rootfs` (the minimal root's plan), `seccomp` (the filter), `cgroup`
  (whole-run limits).

Threat model, layer by layer, what was tried against each and what is out of scope:
`docs/security.md`.

=====================  ==========================================================================
layer                  what it enforces ("namespaces" mode: root + util-linux `unshare`)
=====================  ==========================================================================
process                separate process tree in its own session; the env never `exec`s model text
environment            only PYTHONHASHSEED=0 and PYTHONSAFEPATH=1 (`runner.INTERPRETER_ENV`), which
                       `launch.py` removes before the bootstrap runs; `-s -S`: no site-packages.
                       `-I` minus `-E`: str hashing, so set order, is the same in every run
file system            a minimal root (`rootfs`): the interpreter, its shared libraries and its
                       standard library read-only; a private tmpfs working dir, /tmp, /dev/shm
                       (`disk_bytes` each). Nothing else of the host exists inside, not even /proc
                       (its inode numbers are a counter the whole host shares).
network                an empty network namespace (only a downed loopback)
IPC                    a private IPC namespace: SysV shared memory, semaphores and message queues
                       die with the run and cannot reach the host or the next run
processes              a PID namespace whose init is the supervisor: when it exits the kernel kills
                       every process left (double-forked, setsid daemons included); the supervisor
                       also exits when the caller goes away or its backstop deadline passes
privileges             a fresh unprivileged uid/gid per run (in [1000000, 2000000)), no groups,
                       PR_SET_NO_NEW_PRIVS (a failure is a "sandbox error")
configuration          the program process is forked before the supervisor reads the run's
                       configuration and receives only its own values: the hidden paths, host
                       directories and root plan were never in its memory
system calls           a seccomp filter (`seccomp`, built by libseccomp): no new namespaces
                       (user namespaces included), mounts, ptrace, bpf, io_uring, AIO, keyrings,
                       modify_ldt, landlock, inotify, execve, ..., nothing that evicts, probes or
                       flushes the host's page cache (fadvise, mincore, cachestat, RWF_NOWAIT, sync,
                       syncfs; fsync is a no-op), nothing that numbers an inode from a host-wide
                       counter (pipes, sockets of every family, mq_open, memfd_create, pidfd_open),
                       ENOSYS for syscalls newer than the policy's review and for other ABIs; a
                       failure to load it is a "sandbox error"
per-process limits     RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_NOFILE, no core files
fault signals          SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP end the program through a handler
                       (`inside.exit_on_fault_signals`: exit status = the signal's number), so the
                       kernel does not write the faulting addresses to the host's log
whole-run limits       a cgroup per run (`cgroup`: v2, else v1): memory (no swap), process
                       count, and the summed CPU time of all processes (read every 50 ms); the page
                       cache charged to it is reclaimed before it is removed; where no cgroup can be
                       written, the caller samples the process tree and kills it past a limit
wall time              the caller kills the run at the deadline
output                 stdout and stderr are read with a bound; exceeding it kills the run; a
                       function's JSON result is parsed with bounded depth (`MAX_RESULT_DEPTH`)
=====================  ==========================================================================

Modes, in order of preference: "namespaces" (root), "userns" (unprivileged user namespaces: the
program keeps the caller's uid, mapped to root inside; same layers otherwise), "guard" (no
namespaces: per-run uid when root, rlimits, seccomp and cgroups where available, and a Python audit
hook blocking sockets, fork/exec/subprocess, `os.kill`, ctypes and writes outside the working dir;
an audit hook is *not* a hard boundary, so use guard mode only when nothing else is available).
`RAGEN_SANDBOX_MODE=namespaces|userns|guard` forces one mode and `RAGEN_SANDBOX_CGROUP=v2|v1|watch`
one whole-run limit mechanism (an error if it does not work). `sandbox_isolation()` says what is
active (probed on first use).

Verdicts of a run (`RunResult.verdict`): "ok" (exit status 0), "runtime error" (a fault is one too:
exit status 11 for a segfault), "time limit"
(wall deadline, or CPU time of a process or of the whole run), "memory limit" (MemoryError under
RLIMIT_AS, or the kernel killed a process of the run for memory), "output limit" (stdout/stderr cap
or RLIMIT_FSIZE), "sandbox error" (the sandbox itself could not be set up). Judging the output
(passed / wrong answer) is the caller's job: see `outputs_match` (and `tasks.values_equal`). Nothing a program
does makes these functions raise: every failure is a verdict.
"""

from ragen_envs.code.sandbox.api import run_function, run_program
from ragen_envs.code.sandbox.isolation import Isolation, sandbox_isolation
from ragen_envs.code.sandbox.limits import Limits
from ragen_envs.code.sandbox.result import MAX_RESULT_DEPTH, VERDICTS, RunResult, outputs_match

__all__ = [
    "MAX_RESULT_DEPTH",
    "VERDICTS",
    "Isolation",
    "Limits",
    "RunResult",
    "outputs_match",
    "run_function",
    "run_program",
    "sandbox_isolation",
]
