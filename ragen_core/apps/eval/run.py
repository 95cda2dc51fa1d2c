"""One evaluation from its :class:`~ragen_core.apps.eval.spec.EvalSpec` to its files: play what ``episodes.jsonl``
lacks, then write the summary.

Every finished episode is appended to ``episodes.jsonl`` at once (:class:`~ragen_core.apps.eval.records.EpisodeLog`),
so an interruption loses only the episodes in flight. Three ways an evaluation stops early, each with one line on
stderr that says how many episodes are kept and the command that plays the rest:

- Ctrl-C (exit status 130);
- the server is unreachable or keeps failing after the client's retries (exit status 1);
- nothing else: a failed episode (context length, a refused request, a reply without text) is recorded and counted
  apart, and the evaluation goes on.

When every requested env is refused (a text-only model on vision ids, a server that refuses images), nothing is
evaluated: one line, exit status 2, no summary.

One evaluation plays into a folder at a time: :func:`execute` holds a lock on it (:class:`FolderBusy` for a second
``--resume`` of the same folder while the first plays; both would play the missing episodes and write each twice).

The summary (``summary.json``, ``summary.md``, ``summary.png``) is written when every episode is in the file.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ragen_core.apps.eval.local import ModelSource, run_local
from ragen_core.apps.eval.plan import Key
from ragen_core.apps.eval.records import EPISODES, EpisodeLog, read_episodes
from ragen_core.apps.eval.server import ServerClient, ServerError, run_server
from ragen_core.apps.eval.spec import EvalSpec, api_key
from ragen_core.apps.eval.summary import (
    SUMMARY_JSON,
    SUMMARY_MD,
    SUMMARY_PNG,
    mi_profile,
    strict_json,
    summarize,
    write_markdown,
    write_plot,
)
from ragen_core.locks import FolderLocked, release_folder
from ragen_core.locks import lock_folder as _lock_folder
from ragen_envs.contract import observes_images

__all__ = ["FolderBusy", "Progress", "execute", "lock_folder", "resume_command"]


class FolderBusy(Exception):
    """Another process is playing into this evaluation folder (one line for the user)."""


def lock_folder(folder: Path) -> int | None:
    """The lock of the evaluation folder (:func:`ragen_core.locks.lock_folder`: its descriptor, None where no
    lock can be taken).

    Raises:
        FolderBusy: another process holds it.
    """
    try:
        return _lock_folder(folder)
    except FolderLocked:
        raise FolderBusy(f"{folder} is being played by another ragen eval right now: let it finish (a second one "
                         "would play the same missing episodes again)") from None


def resume_command(folder: Path) -> str:
    return f"ragen eval --resume {folder}"


class Progress:
    """A progress bar over episodes (tqdm's rate is episodes/s) with the running success and the failures."""

    def __init__(self, total: int, done: int, enabled: bool):
        self.bar = None
        self.successes = self.finished = self.failed = 0
        if enabled:
            from ragen_core.progress import progress_bar

            self.bar = progress_bar(total, initial=done, desc="eval", unit="ep")

    def update(self, line: dict[str, Any]) -> None:
        if line["failed"]:
            self.failed += 1
        else:
            self.finished += 1
            self.successes += bool(line["success"])
        if self.bar is not None:
            rate = self.successes / self.finished if self.finished else 0.0
            self.bar.set_postfix_str(f"success {rate:.1%} of {self.finished}, failed {self.failed}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()




def _refuse_image_envs(spec: EvalSpec, source: ModelSource, folder: Path, err: TextIO) -> None:
    """An in-process model that takes no images cannot play a vision id: refuse it with the reason."""
    for env_id, plan in spec.env_plans().items():
        if observes_images(env_id, plan.env_kwargs) and not source.load(env_id, plan.env_kwargs).vision:
            spec.refused[env_id] = "the model takes no images (a text-only policy: no image token)"
            err.write(f"ragen eval: {env_id} refused: {spec.refused[env_id]}\n")
    spec.save(folder)


def _run_config(spec: EvalSpec) -> Any:
    from ragen_core.apps.export import is_run_dir
    from ragen_core.training.config import load_config

    return load_config(Path(str(spec.model)) / "config.toml") if is_run_dir(str(spec.model)) else None


def execute(spec: EvalSpec, folder: Path, *, progress: bool, prog: str = "ragen eval", out: TextIO | None = None,
            err: TextIO | None = None, locked: bool = False) -> int:
    """Play the episodes the folder lacks and write the summary; the exit status (0, 1 server gone, 2 every env
    refused: nothing evaluated, 130 Ctrl-C). `locked`: the caller holds the folder's lock (:func:`lock_folder`)
    already; otherwise it is taken here (FolderBusy when another process holds it)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    fd = None if locked else lock_folder(folder)
    try:
        return _execute(spec, folder, progress=progress, prog=prog, out=out, err=err)
    finally:
        release_folder(fd)


def _execute(spec: EvalSpec, folder: Path, *, progress: bool, prog: str, out: TextIO, err: TextIO) -> int:
    """:func:`execute` with the folder locked."""
    log = EpisodeLog.open(folder / EPISODES)
    source = None
    if spec.backend == "local":
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars are noise between the evaluation's own lines
        source = ModelSource(str(spec.model), spec.device, _run_config(spec))
        _refuse_image_envs(spec, source, folder, err)
    all_keys = spec.keys()
    if not all_keys:  # every env refused (a text model on vision ids): nothing to play, no summary to write
        err.write(f"{prog}: nothing was evaluated: every requested env was refused\n")
        return 2
    todo: list[Key] = [k for k in all_keys if k not in log.done]
    bar = Progress(len(all_keys), len(all_keys) - len(todo), progress)
    t0 = time.perf_counter()

    def on_record(line: dict[str, Any]) -> None:
        log.write(line)
        bar.update(line)

    def on_refused(env_id: str, why: str) -> None:
        spec.refused[env_id] = why
        spec.save(folder)
        err.write(f"\n{prog}: {env_id} refused: {why}\n")

    def kept() -> str:
        return (f"{len(log.done & set(spec.keys()))} of {len(spec.keys())} episodes are in {folder}; "
                f"play the rest with `{resume_command(folder)}`")

    try:
        if todo and source is not None:
            run_local(source, spec.env_plans(), todo, spec.group_size, spec.workers, on_record,
                      seeds=range(spec.seed, spec.seed + spec.episodes))
        elif todo:
            client = ServerClient(str(spec.base_url), str(spec.model_name), api_key(spec.api_key_env),
                                  timeout=spec.timeout, max_retries=spec.max_retries, extra_body=spec.extra_body)
            plans = spec.env_plans()
            vision = {e: observes_images(e, p.env_kwargs) for e, p in plans.items()}
            asyncio.run(run_server(client, plans, todo, spec.group_size, spec.workers, vision, on_record, on_refused))
    except ServerError as e:
        bar.close()
        err.write(f"{prog}: {e}; {kept()}\n")
        return 1
    except KeyboardInterrupt:
        bar.close()
        err.write(f"\n{prog}: interrupted; {kept()}\n")
        return 130
    bar.close()
    if not spec.keys():  # the server refused every env while playing
        err.write(f"{prog}: nothing was evaluated: every requested env was refused\n")
        return 2
    wall = time.perf_counter() - t0
    text = write_summary(spec, folder, source, played=len(todo), wall_s=wall)
    from ragen_core.training.report import markdown_to_text

    out.write(markdown_to_text(text) + "\n")
    out.write(f"results: {folder} ({EPISODES}, {SUMMARY_JSON}, {SUMMARY_MD}, {SUMMARY_PNG})\n")
    return 0


def write_summary(spec: EvalSpec, folder: Path, source: ModelSource | None, played: int, wall_s: float) -> str:
    """``summary.json``, ``summary.md`` and ``summary.png`` from the folder's ``episodes.jsonl``; the Markdown."""
    import json

    wanted = {(k.env, k.seed, k.sample) for k in spec.keys()}  # a refused env's lines (if any) are left out
    lines = [x for x in read_episodes(folder / EPISODES) if (x["env"], x["seed"], x["sample"]) in wanted]
    # In key order, not the order episodes finished in (a server's workers, a resumed evaluation's second part): the
    # summary is then a function of the episodes alone, its float sums, the pre-check's bootstrap and the MI
    # proxies' "first N seeds" included.
    lines.sort(key=lambda x: (int(x["seed"]), int(x["sample"])))
    envs = summarize(lines, spec.envs, spec.refused, spec.group_size)
    if source is not None and spec.mi_groups > 0:
        from ragen_core.training.trainer import resolve_device

        device = str(resolve_device(spec.device))
        for env_id, plan in spec.env_plans().items():
            mine = [x for x in lines if x["env"] == env_id]
            envs[env_id]["mi"] = mi_profile(mine, str(source.folder_for(env_id, plan.env_kwargs)), spec.mi_groups,
                                            device)
    plans = spec.env_plans()
    # Each env's own: a config's env and the others (env defaults) can sample differently without the flags.
    per_env = {e: ("greedy (temperature 0)" if p.settings.greedy else
                   f"temperature {p.settings.temperature:g}, top-p {p.settings.top_p:g}") for e, p in plans.items()}
    if len(set(per_env.values())) <= 1:
        sampling = next(iter(per_env.values()), "n/a")
    else:
        sampling = "per env: " + "; ".join(f"{e} {text}" for e, text in per_env.items())
    if spec.backend == "server":
        backend = f"server {spec.base_url}, model {spec.model_name}, {spec.workers} workers"
    else:
        from ragen_core.training.trainer import resolve_device

        per_call = max(1, spec.workers // spec.group_size)
        backend = f"in process ({resolve_device(spec.device)}), batches of {per_call} seeds"
    header = {"model": spec.label, "backend": backend, "sampling": sampling,
              "seeds": f"{spec.seed}..{spec.seed + spec.episodes - 1}", "group_size": spec.group_size,
              "date": spec.created}
    payload = {"model": spec.label, "backend": spec.backend, "seeds": [spec.seed, spec.seed + spec.episodes - 1],
               "episodes_per_env": spec.episodes, "group_size": spec.group_size, "sampling": sampling,
               "played_this_run": played, "wall_s": wall_s, "envs": envs,
               "settings": {e: spec.plans[e] for e in spec.envs}}
    (folder / SUMMARY_JSON).write_text(json.dumps(strict_json(payload), indent=1) + "\n", encoding="utf-8")
    text = write_markdown(folder / SUMMARY_MD, header, envs, {e: spec.plans[e] for e in spec.envs})
    write_plot(folder / SUMMARY_PNG, envs, f"{spec.label}: {sampling}")
    return text
