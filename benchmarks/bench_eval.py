"""`ragen eval` throughput: episodes/s through `transformers serve` at 1, 4 and 16 workers, against in-process batched
evaluation of the same model on the same episodes.

    python -m benchmarks.bench_eval [--quick] [--episodes N] [--no-cb]

The workload is fixed: the untrained default tiny model (0.62 M parameters, fp32), greedy, on ragen/Sokoban-v0 with
the sokoban_tiny preset's settings (single-turn context, 2 turns, 64 new tokens a turn). Untrained, the model never
writes a closing tag, so every episode is 2 turns of 64 generated tokens whichever path plays it; the benchmark
checks that every path played the same episodes (responses and outcomes) before it reports a rate.

Each path first plays 4 unmeasured episodes (a warm-up, seeds 0-3, disjoint from the measured ones); then each
measurement plays the same `--episodes` seeds. Every server measurement runs on a server of its own, started for it
and warmed up: `transformers serve --continuous-batching` keeps the KV blocks of finished requests and reuses them
for a later prompt with the same prefix (its prefix sharing, on by default), so on one server the 4- and 16-worker
rows would replay the 1-worker row's prompts with their prefill already cached.
Paths, each through the `ragen eval` command itself (``ragen_core.apps.eval.main``; the rate is the played episodes
over the wall time of the playing loop, ``summary.json``'s ``wall_s``, without model loading and summary):

- in process: batched ``rollout()`` with ``--workers`` 1 (one episode per generate call) and 16, 64 (the default);
- ``transformers serve MODEL`` (one ``generate`` per request, one request at a time) with ``--workers`` 1, 4, 16;
- ``transformers serve MODEL --continuous-batching`` (paged attention, requests batched as they come; skipped
  with ``--no-cb``) with ``--workers`` 1, 4, 16.

Every process runs one torch thread (the in-process path's choice for the tiny model; ``OMP_NUM_THREADS=1`` for the
server). The server and the client share the machine's cores; the 1-minute load average at the start and the end is
recorded, since other jobs may share them too. Results: ``benchmarks/results/eval.json`` (quick:
``eval_quick.json``) with the machine and a Markdown table.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ENV = "ragen/Sokoban-v0"
PRESET = "sokoban_tiny"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`transformers serve MODEL` on 127.0.0.1 in its own process group."""

    def __init__(self, model: Path, extra: list[str], log: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "transformers.cli.transformers", "serve", str(model),
                                          "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
                                          "--log-level", "warning", *extra],
                                         stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 600:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited: {log.read_text()[-1500:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        self.start_s = time.perf_counter() - t0
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("transformers serve did not start within 600 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _play(args: list[str], out: Path) -> dict[str, Any]:
    """One `ragen eval` run; its summary and its episodes (key -> success, responses, generated tokens)."""
    from ragen_core.apps.eval import main as ragen_eval

    code = ragen_eval([*args, "--config", PRESET, "--temperature", "0", "--mi-groups", "0", "--out", str(out),
                       "--no-progress"])
    if code != 0:
        raise RuntimeError(f"ragen eval {' '.join(args)} exited with {code}")
    summary = json.loads((out / "summary.json").read_text())
    episodes = {}
    latencies = []
    for line in (out / "episodes.jsonl").read_text().splitlines():
        r = json.loads(line)
        # The server strips whitespace at the ends of what it returns (its Qwen response parser): compare without
        # whitespace, and the generated token counts, which it reports.
        norm = ["".join(t["response"].split()) for t in r["turns"]]
        episodes[(r["seed"], r["sample"])] = (r["success"], norm, [t["completion_tokens"] for t in r["turns"]])
        latencies += [t["latency_s"] for t in r["turns"] if t["latency_s"] is not None]
    return {"summary": summary, "episodes": episodes, "latencies": latencies}


def _row(path: str, workers: int, played: dict[str, Any]) -> dict[str, Any]:
    s = played["summary"]
    env = s["envs"][ENV]
    n = s["played_this_run"]
    turns = env["mean_turns"] * env["episodes"]
    lat = played["latencies"]
    return {"path": path, "workers": workers, "episodes": n, "wall_s": s["wall_s"],
            "episodes_per_s": n / s["wall_s"], "requests_per_s": turns / s["wall_s"] if lat else None,
            "request_latency_s": sum(lat) / len(lat) if lat else None,
            "tokens_per_episode": env["tokens_per_episode"]}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import check_output_path, positive_int

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_eval", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 episodes per measurement")
    parser.add_argument("--episodes", type=positive_int, default=None, help="episodes per measurement (default 64)")
    parser.add_argument("--no-cb", action="store_true", help="skip the continuous-batching server")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    check_output_path(parser, args.out)
    from benchmarks.machine import describe_machine, load_average
    from benchmarks.readme_tables import write_result
    from ragen_core.policy import default_tiny_model_dir

    n = args.episodes or (8 if args.quick else 64)
    model = default_tiny_model_dir()
    load_start, t_start = load_average(), time.perf_counter()
    rows: list[dict[str, Any]] = []
    reference: dict | None = None
    starts: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def record(path: str, workers: int, played: dict[str, Any]) -> None:
            nonlocal reference
            if reference is None:
                reference = played["episodes"]
            elif played["episodes"] != reference:
                raise RuntimeError(f"{path} with {workers} workers played other episodes than the first path")
            rows.append(_row(path, workers, played))
            print(f"{path:<40} workers {workers:>2}: {rows[-1]['episodes_per_s']:.2f} episodes/s", flush=True)

        _play([str(model), "--envs", ENV, "--episodes", "4", "--seed", "0"], root / "warm-up")  # not measured
        for w in (64, 16, 1):
            record("in process, batched rollout()", w,
                   _play([str(model), "--envs", ENV, "--episodes", str(n), "--workers", str(w)], root / f"local{w}"))
        servers = [("transformers serve", [])] + ([] if args.no_cb else
                                                  [("transformers serve --continuous-batching",
                                                    ["--continuous-batching"])])
        for label, extra in servers:
            for w in (1, 4, 16):
                # A fresh server per measurement: the continuous-batching server's prefix cache would otherwise
                # hold every prompt of the measured episodes after the first row (see the module docstring).
                server = Server(model, extra, root / "serve.log")
                starts.setdefault(label, []).append(server.start_s)
                try:
                    _play(["--base-url", server.url, "--model-name", str(model), "--envs", ENV, "--episodes", "4",
                           "--seed", "0", "--workers", "4"], root / f"warm-up{len(rows)}")  # not measured
                    record(label, w, _play(["--base-url", server.url, "--model-name", str(model), "--envs", ENV,
                                            "--episodes", str(n), "--workers", str(w)], root / f"srv{len(rows)}"))
                finally:
                    server.stop()
    machine = describe_machine()
    machine["load_average_start"], machine["load_average_end"] = load_start, load_average()
    lines = ["| path | workers | episodes | episodes/s | requests/s | mean request latency (s) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        req = "" if r["requests_per_s"] is None else f"{r['requests_per_s']:.2f}"
        lat = "" if r["request_latency_s"] is None else f"{r['request_latency_s']:.3f}"
        lines.append(f"| {r['path']} | {r['workers']} | {r['episodes']} | {r['episodes_per_s']:.2f} | {req} | {lat} |")
    tokens = rows[0]["tokens_per_episode"]
    lines += ["", f"The untrained tiny model (0.62 M parameters, fp32), greedy, on {ENV} with the {PRESET} preset's "
              f"settings: {tokens:.0f} generated tokens per episode on every path (2 turns x 64), the same episodes "
              f"on every row (checked). One torch thread per process; the server and the client share the "
              f"machine's {machine['cores']} cores; 1-minute load average {load_start} at the start, "
              f"{machine['load_average_end']} at the end (other jobs were sharing the cores). A fresh server for "
              "each server row (no prompt cached from another row); server start-up, not counted: "
              + ", ".join(f"{k} {statistics.median(v):.0f} s" for k, v in starts.items()) + "; `python -m benchmarks."
              "bench_eval`."]
    result = {"benchmark": "eval", "date": machine["date"], "quick": bool(args.quick), "episodes": n,
              "machine": machine, "rows": rows, "server_start_s": starts, "markdown": "\n".join(lines),
              "wall_s": time.perf_counter() - t_start}
    write_result(result, args.out or RESULTS / ("eval_quick.json" if args.quick else "eval.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
