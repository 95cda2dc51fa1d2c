"""What a reader copies from README.md and docs/*.md names what exists, on every page and for every program: each
shown `ragen ...` command parses and passes the checks its command makes before any work (in the order a reader
runs them: a run folder a command reads was made by an earlier `ragen train` of the docs), each flag is in its
command's --help, each repository path exists, each `key=value` is a config key with a value of its type, each
`make` target, `pip install` extra and version pin is the project's; each Python block compiles, and every module,
name, keyword argument and attribute it uses exists with the signature shown (the env-only blocks run for real);
each YAML block is a config the code accepts. No training: the whole file takes seconds.

The fenced blocks are read line by line (a fence opens with ``` and a language or none, and closes at the next
```), so that a block in any language leaves the pairing of the others intact (a regex for ```bash blocks alone
paired a Python block's closing fence with the next opening one, and README.md's commands were never seen)."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import fnmatch
import importlib
import importlib.util
import inspect
import io
import re
import runpy
import shlex
import subprocess
import sys
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from ragen_core.apps import cli
from ragen_core.apps import train as train_app
from ragen_core.training.config import TrainConfig, dump_toml, load_config
from ragen_core.training.trainer import check_runnable

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
#: What a reader reads: the README and the pages of docs/ (not docs/ subfolders: generated reports).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A path whose first part is one of these names the repository's own file: it must exist.
REPO_DIRS = ("configs", "docs", "examples", "scripts", "benchmarks", "ragen_core", "ragen_envs", "theory_checks",
             "tests", "mutation")
#: Programs of other projects a page shows (servers, launchers, the shell): theirs to check, not this test's.
EXTERNAL = {"source", "transformers", "vllm", "trl", "accelerate", "torchrun", "nvidia-smi", "cd", "export",
            "sysctl", "git"}
FLAG = r"(?<![\w-])(--[a-z][\w-]*)"


# ---------------------------------------------------------------------------------------------------- extraction


@dataclass(frozen=True)
class Block:
    """A fenced code block: its page, the line of its opening fence, its language ("" when none) and text."""

    page: str
    line: int
    lang: str
    text: str


@dataclass(frozen=True)
class Shown:
    """One shell command of a block: where it is, its words (after `VAR=value` prefixes) and its comment."""

    where: str
    words: list[str]
    comment: str

    def __str__(self) -> str:
        return f"{self.where}: `{shlex.join(self.words)}`"


def fenced_blocks(page: Path) -> list[Block]:
    """The fenced code blocks of `page`, paired line by line."""
    blocks, lines = [], page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```\s*([\w+-]*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, body, i = i, [], i + 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(m.group(1)):] if lines[i].startswith(m.group(1)) else lines[i])
            i += 1
        assert i < len(lines), f"{page.name}:{start + 1}: a code fence that is never closed"
        blocks.append(Block(_name(page), start + 1, m.group(2), "\n".join(body) + "\n"))
        i += 1
    return blocks


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name


def all_blocks(lang: str | None = None) -> list[Block]:
    return [b for page in PAGES for b in fenced_blocks(page) if lang is None or b.lang == lang]


def split_comment(line: str) -> tuple[str, str]:
    """The code and the comment (after an unquoted `#` at a word start) of a shell line."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i + 1:].strip()
    return line, ""


def shell_commands(block: Block) -> list[Shown]:
    """The commands of a shell block: continued lines joined, split at `&&`, `;`, `|` and `&`, `VAR=value`
    prefixes dropped; each named by the line it starts on."""
    commands, lines = [], block.text.splitlines()
    i = 0
    while i < len(lines):
        start, code, comment = i, "", ""
        while True:
            part, comment = split_comment(lines[i])
            i += 1
            if part.rstrip().endswith("\\") and i < len(lines):
                code += part.rstrip()[:-1] + " "
                continue
            code += part
            break
        words: list[str] = []
        for word in [*shlex.split(code), ";"]:
            if word in ("&&", ";", "|", "&", "||"):
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                    words.pop(0)
                if words:
                    commands.append(Shown(f"{block.page}:{block.line + 1 + start}", words, comment))
                words = []
            else:
                words.append(word)
    return commands


def shown_commands() -> list[Shown]:
    return [c for b in all_blocks() if b.lang in ("bash", "sh", "console", "shell") for c in shell_commands(b)]


def inline_spans() -> list[tuple[str, str]]:
    """(page, text) of every inline code span of the pages."""
    return [(_name(page), span) for page in PAGES
            for span in re.findall(r"`([^`\n]+)`", page.read_text())]


# ------------------------------------------------------------------------------------------------------- helpers


def is_placeholder(path: str) -> bool:
    """A path that is the reader's own: absolute, in the home folder, a `my_` file, or with an ALL-CAPS part."""
    return (path.startswith(("/", "~", "$", "http")) or Path(path).name.startswith("my_")
            or any(re.fullmatch(r"[A-Z][A-Z0-9_]+(\.\w+)?", part) for part in path.split("/")))


def repo_path_problem(value: str) -> str | None:
    """Why `value`, a path into the repository (its first part is one of :data:`REPO_DIRS`), is wrong, or None."""
    value = value.strip("'\"")
    if ("/" not in value or value.split("/", 1)[0] not in REPO_DIRS or is_placeholder(value) or "..." in value
            or re.search(r"[<>{}*\[\]]", value) or git_ignored(value)):
        return None  # not a path into the repository, a template of paths, or one a command makes
    return None if (ROOT / value.rstrip("/")).exists() else f"names {value}, which is not in the repository"


def git_ignored(path: str) -> bool:
    """`path` matches a pattern of the repository's .gitignore: something a command makes, not a file it has."""
    patterns = [p.strip() for p in (ROOT / ".gitignore").read_text().splitlines() if p.strip()[:1] not in ("", "#")]
    parts = path.rstrip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatch(prefix, pattern.rstrip("/")) or fnmatch.fnmatch(parts[i], pattern.rstrip("/"))
               for pattern in patterns for i, prefix in enumerate(prefixes))


_HELP: dict[tuple[str, ...], str] = {}


def help_text(key: tuple[str, ...], call: Any) -> str:
    """What `call` (a --help run that ends in SystemExit) prints, once per key."""
    if key not in _HELP:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            with contextlib.suppress(SystemExit):
                call()
        _HELP[key] = out.getvalue()
    return _HELP[key]


def ragen_help(name: str) -> str:
    return help_text(("ragen", name), lambda: cli.run_command(name, ["--help"]))


def module_help(module: str, sub: list[str]) -> str:
    """`python -m MODULE [SUB...] --help`, in process."""
    def run() -> None:
        argv = sys.argv
        sys.argv = [module, *sub, "--help"]
        try:
            with warnings.catch_warnings():  # runpy's note on a module imported before: harmless for --help
                warnings.simplefilter("ignore", RuntimeWarning)
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        finally:
            sys.argv = argv
    return help_text(("module", module, *sub), run)


def script_help(path: str) -> str:
    def run() -> None:
        argv = sys.argv
        sys.argv = [path, "--help"]
        try:
            runpy.run_path(str(ROOT / path), run_name="__main__")
        finally:
            sys.argv = argv
    return help_text(("script", path), run)


def missing_flags(text: str, help_out: str) -> list[str]:
    """The `--flags` of `text` that `help_out` does not list."""
    return [f for f in re.findall(FLAG, text) if not re.search(rf"(?<![\w-]){re.escape(f.split('=')[0])}(?![\w-])",
                                                               help_out)]


def leading_words(words: list[str]) -> list[str]:
    """The sub-command words after a module (`run` of `same_seed run CODE`): lower-case words before the first
    flag, placeholder or path."""
    out = []
    for w in words:
        if w.startswith("-") or not re.fullmatch(r"[a-z_]+", w):
            break
        out.append(w)
    return out


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def run_quietly(main: Any, argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return int(status or 0), err.getvalue()


# ---------------------------------------------------------------------------------------- `ragen` command checks


def _on_cpu(cfg: TrainConfig) -> TrainConfig:
    cfg.run.device = "cpu"  # a GPU config's device is not this machine's to check
    return cfg


def check_train(cmd: Shown, argv: list[str]) -> str | None:
    """`ragen train`'s own checks before training (`_prepare`); a new run then leaves the folder a real start
    leaves after its warm start (config.toml, a step-0 checkpoint), for the commands that read it later."""
    args = train_app.build_parser().parse_args(argv)
    try:
        cfg, run_dir, _ = train_app._prepare(args)
    except Exception as e:  # noqa: BLE001 - the failing command, named
        return f"{type(e).__name__}: {e}"
    if not args.resume:
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "config.toml").write_text(dump_toml(cfg))
        torch.save({"step": 0, "model": {}}, run_dir / "checkpoints" / "latest.pt")
    return None


def _input_problem(path: str) -> str | None:
    """A run folder or file that a command reads: the repository's, one an earlier command made, or the reader's."""
    if is_placeholder(path) or path == "tiny":
        return None
    if path.split("/")[0] in REPO_DIRS:
        return repo_path_problem(path)
    return None if Path(path).exists() else (f"reads {path}, which no earlier command of the docs makes (train "
                                             "it first, or name the reader's own path in CAPITALS)")


def check_export(cmd: Shown, argv: list[str]) -> str | None:
    """RUN_DIR is a run folder an earlier `ragen train` made (or the reader's own)."""
    from ragen_core.apps.export import build_parser, is_run_dir

    run_dir = build_parser("ragen export").parse_args(argv).run_dir
    if is_placeholder(run_dir) or is_run_dir(run_dir):
        return None
    return f"{run_dir} is not a run folder an earlier `ragen train` of the docs made"


def check_diagnose(cmd: Shown, argv: list[str]) -> str | None:
    """The input and --model exist; on a file of the repository without --model it runs for real (no torch)."""
    from ragen_core.apps import diagnose

    args = diagnose.build_parser("ragen diagnose").parse_args(argv)
    for path in (args.rollouts, args.model):
        problem = _input_problem(path) if path else None
        if problem:
            return problem
    if args.model is None and args.rollouts.split("/")[0] in REPO_DIRS:
        status, err = run_quietly(lambda a: diagnose.main(a, prog="ragen diagnose"), [str(ROOT / args.rollouts),
                                                                                      *argv[1:]])
        if status != 0:
            return f"exits {status}: {err.strip()}"
    return None


def check_eval(cmd: Shown, argv: list[str]) -> str | None:
    """What `ragen eval` checks before the folder is made (`build_spec`), where MODEL is not the reader's own."""
    from ragen_core.apps.eval import cli as eval_cli
    from ragen_core.apps.eval.spec import SpecError, build_spec

    args = eval_cli.build_parser("ragen eval").parse_args(argv)
    if args.resume:
        return None if is_placeholder(args.resume) else _input_problem(args.resume)
    if args.model and is_placeholder(args.model):
        return None
    for path in (args.model, args.config):
        problem = _input_problem(path) if path and "/" in path else None
        if problem:
            return problem
    try:
        build_spec(args, [])
    except SpecError as e:
        return f"SpecError: {e}"
    return None


def check_reproduce(cmd: Shown, argv: list[str]) -> str | None:
    """`ragen reproduce`'s argument checks and its list of runs (nothing started); a comment that says "N runs"
    says how many the command lists."""
    from ragen_core.apps.reproduce import cli as rc
    from ragen_core.apps.reproduce.experiments import EXPERIMENTS
    from ragen_core.apps.reproduce.spec import build_runs, choose_seeds
    from ragen_core.apps.reproduce.study import find_configs_dir

    args = rc.build_parser("ragen reproduce").parse_args(argv)
    problem = rc._argument_problem(args)
    if problem:
        return problem
    if args.from_results:
        return _input_problem(args.from_results)
    exp = EXPERIMENTS[args.experiment]
    seeds = choose_seeds(exp, args.seeds, args.first_seed, args.quick)
    groups = tuple(g for g in args.envs.split(",")) if args.envs else None
    configs = find_configs_dir(args.configs_dir or rc.default_configs_dir(), groups or exp.groups())
    specs = build_runs(exp, seeds, configs, Path("warm"), quick=args.quick, groups=groups)
    said = re.search(r"\b(\d+) runs\b", cmd.comment)
    if said and int(said.group(1)) != len(specs):
        return f"its comment says {said.group(1)} runs; it lists {len(specs)}"
    said = re.search(r"\bseeds (\d+)\.\.(\d+)", cmd.comment)
    if said and (int(said.group(1)), int(said.group(2))) != (seeds[0], seeds[-1]):
        return f"its comment says seeds {said.group(1)}..{said.group(2)}; it runs {seeds[0]}..{seeds[-1]}"
    return None


def check_runs_for_real(name: str) -> Any:
    """A command that takes a second (`ragen envs`, `ragen configs`): run it; exit status 0."""
    def check(cmd: Shown, argv: list[str]) -> str | None:
        module = importlib.import_module(cli.COMMANDS[name].module)
        status, err = run_quietly(lambda a: module.main(a, prog=f"ragen {name}"), argv)
        return None if status == 0 else f"exits {status}: {err.strip()}"
    return check


def check_parses(name: str) -> Any:
    """A command that would run for minutes: its own parser accepts the arguments."""
    def check(cmd: Shown, argv: list[str]) -> str | None:
        if name == "bench":
            from benchmarks import run_all
            from ragen_core.apps.bench import list_problem

            return list_problem(argv, [n for n, _ in run_all.BENCHMARKS], sorted(run_all.QUICK_ALWAYS))
        importlib.import_module(cli.COMMANDS[name].module).build_parser(f"ragen {name}").parse_args(argv)
        return None
    return check


RAGEN_CHECKS = {"train": check_train, "export": check_export, "diagnose": check_diagnose, "eval": check_eval,
                "reproduce": check_reproduce, "envs": check_runs_for_real("envs"),
                "configs": check_runs_for_real("configs"), "play": check_parses("play"),
                "verify": check_parses("verify"), "bench": check_parses("bench")}


def check_ragen(cmd: Shown) -> str | None:
    if len(cmd.words) < 2 or cmd.words[1] not in cli.COMMANDS:
        return f"no such command; `ragen --help` lists {', '.join(cli.COMMANDS)}"
    name, argv = cmd.words[1], cmd.words[2:]
    flags = missing_flags(shlex.join(argv), ragen_help(name))
    if flags:
        return f"`ragen {name} --help` has no {', '.join(flags)}"
    for word in argv:
        problem = repo_path_problem(word)
        if problem:
            return problem
    try:
        return RAGEN_CHECKS[name](cmd, argv)
    except SystemExit as e:  # an argparse error (its message went to stderr)
        return f"its parser refuses it (exit {e.code})"


# ----------------------------------------------------------------------------- python, make and pip command checks


def check_verl_overrides(words: list[str]) -> str | None:
    """`python -m verl.trainer.main_ppo KEY=VALUE...`: the keys and values of this project's integration (the
    filter and MI sections, the trainer mode, the agent loop, the setup hook) are ones it accepts."""
    from ragen_core.integrations.verl import core

    algorithm: dict[str, dict[str, Any]] = {}
    for word in words:
        key, _, value = word.lstrip("+").partition("=")
        parts = key.split(".")
        if parts[:2] in (["algorithm", "ragen_filter"], ["algorithm", "ragen_mi"]):
            algorithm.setdefault(parts[1], {})[parts[2]] = _yaml_value(value)
        elif key == "trainer.v1.trainer_mode" and value != core.TRAINER_MODE:
            return f"trainer mode {value}; the integration registers {core.TRAINER_MODE}"
        elif key.endswith("default_agent_loop") and value != core.AGENT_LOOP_NAME:
            return f"agent loop {value}; the integration registers {core.AGENT_LOOP_NAME}"
        elif key.endswith("worker_process_setup_hook") and value.startswith("ragen_core."):
            module, _, attr = value.rpartition(".")
            if not callable(getattr(importlib.import_module(module), attr, None)):
                return f"{value} is not a function"
    try:
        core.filter_spec_from_algorithm(algorithm)
        core.mi_settings_from_algorithm(algorithm)
    except ValueError as e:
        return f"ValueError: {e}"
    return None


def _yaml_value(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def check_python(cmd: Shown) -> str | None:
    """`python -m MODULE`, `python FILE.py`, `python -c CODE`."""
    words = cmd.words[1:]
    if words[:1] == ["-m"]:
        module, rest = words[1], words[2:]
        if module in ("venv", "pip", "pytest"):
            return None
        if module.startswith("verl."):
            return check_verl_overrides(rest)
        if importlib.util.find_spec(module) is None:
            return f"no module {module}"
        flags = [w for w in rest if w.startswith("--")]
        if flags:
            missing = missing_flags(" ".join(flags), module_help(module, leading_words(rest)))
            if missing:
                return f"`python -m {module} --help` has no {', '.join(missing)}"
        return None
    if words[:1] == ["-c"]:
        done = subprocess.run([sys.executable, "-c", words[1]], capture_output=True, text=True, timeout=60,
                              cwd=ROOT)
        return None if done.returncode == 0 else f"exits {done.returncode}: {done.stderr.strip()[-500:]}"
    script = words[0]
    if not (ROOT / script).is_file():
        return f"no file {script} in the repository"
    missing = missing_flags(" ".join(w for w in words[1:] if w.startswith("--")), script_help(script))
    return f"`python {script} --help` has no {', '.join(missing)}" if missing else None


def makefile_targets() -> tuple[set[str], set[str]]:
    text = (ROOT / "Makefile").read_text()
    return (set(re.findall(r"^([\w-]+):", text, flags=re.M)),
            set(re.findall(r"^([A-Z_]+)\s*[?:]?=", text, flags=re.M)))


def check_make(cmd: Shown) -> str | None:
    targets, variables = makefile_targets()
    for word in cmd.words[1:]:
        if "=" in word:
            if word.split("=", 1)[0] not in variables:
                return f"the Makefile has no variable {word.split('=', 1)[0]}"
        elif word not in targets:
            return f"the Makefile has no target {word}"
    return None


def requirement_problem(req: str) -> str | None:
    """A requirement a page shows: the project's extras exist, a wheel is named by the project's version, a pin
    of a package the project pins is the project's pin."""
    project = pyproject()["project"]
    extras = project["optional-dependencies"]
    m = re.match(r"^(ragen2|\.|-e\s*\.)?\[([\w,-]+)\]", req.replace("-e ", ""))
    if m and (m.group(1) in ("ragen2", ".", None) or req.startswith(".")):
        unknown = [e for e in m.group(2).split(",") if e not in extras]
        if unknown and m.group(1) in ("ragen2", "."):
            return f"{req}: no extra {', '.join(unknown)} in pyproject.toml (extras: {', '.join(extras)})"
    for wheel in re.findall(r"ragen2-([\w.]+)-py3-none-any\.whl", req):
        if wheel != project["version"]:
            return f"{req}: the wheel of version {wheel}; pyproject.toml says {project['version']}"
    pin = re.match(r"^([\w-]+)(\[[\w,-]+\])?==([\w.]+)$", req)
    if pin:
        return pin_problem(pin.group(1), pin.group(3))
    return None


def project_pins() -> dict[str, str]:
    """Every `name==version` of pyproject.toml's dependencies and the Makefile's torch pin."""
    project = pyproject()["project"]
    reqs = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    pins = {m.group(1).lower(): m.group(2) for r in reqs if (m := re.match(r"^([\w-]+)(?:\[[^]]*\])?==([\w.]+)", r))}
    torch_pin = re.search(r"^TORCH \?= torch==([\w.]+)", (ROOT / "Makefile").read_text(), flags=re.M)
    pins["torch"] = torch_pin.group(1)
    return pins


def pin_problem(name: str, version: str) -> str | None:
    pinned = project_pins().get(name.lower())
    if pinned is not None and pinned != version:
        return f"{name}=={version}; the project pins {name}=={pinned}"
    return None


def check_pip(cmd: Shown) -> str | None:
    words = cmd.words[2:] if cmd.words[1:2] in (["install"], ["wheel"]) else []
    for i, word in enumerate(words):
        if word.startswith("-") and word not in ("-e",):
            continue
        if i and words[i - 1] in ("--index-url", "-w", "--extra-index-url"):
            continue
        problem = requirement_problem(("-e " if i and words[i - 1] == "-e" else "") + word)
        if problem:
            return problem
    return None


PROGRAM_CHECKS = {"ragen": check_ragen, "python": check_python, "python3": check_python, "make": check_make,
                  "pip": check_pip}


def check_one(cmd: Shown) -> str | None:
    """Why `cmd` is wrong (one line), or None; an exception a check raises is its answer too."""
    try:
        return PROGRAM_CHECKS[cmd.words[0]](cmd)
    except Exception as e:  # noqa: BLE001 - the failing command, named
        return f"{type(e).__name__}: {e}"


# ------------------------------------------------------------------------------------------------------ the tests


def test_the_extraction_finds_the_blocks_and_commands_of_every_page(tmp_path):
    """Not vacuous: every fence pairs (a Python block before a shell block leaves the shell block whole; the
    ```bash-only regex missed README.md's commands), and every kind of block and program the pages show is seen."""
    page = tmp_path / "p.md"
    page.write_text("```python\nx = 1\n```\ntext `a`\n\n```bash\nA=1 ragen envs  # all\nmake demo && \\\n"
                    "  ragen configs x\n```\n")
    blocks = fenced_blocks(page)
    assert [(b.lang, b.line, b.text) for b in blocks] == [
        ("python", 1, "x = 1\n"), ("bash", 6, "A=1 ragen envs  # all\nmake demo && \\\n  ragen configs x\n")]
    assert [(c.words, c.comment) for c in shell_commands(blocks[1])] == [
        (["ragen", "envs"], "all"), (["make", "demo"], ""), (["ragen", "configs", "x"], "")]

    commands = shown_commands()
    assert ["ragen", "train", "--resume", "runs/sokoban-tiny"] in [c.words for c in commands if "README" in c.where]
    assert {"ragen", "python", "make", "pip"} <= {c.words[0] for c in commands}
    assert {c.words[1] for c in commands if c.words[0] == "ragen"} >= {"train", "export", "diagnose", "eval",
                                                                       "reproduce"}
    assert len(all_blocks("python")) >= 5 and len(all_blocks("yaml")) >= 2


def test_every_shown_program_is_one_this_test_checks():
    """A new program in a page is checked here or declared another project's (EXTERNAL): none goes unseen."""
    unknown = [str(c) for c in shown_commands() if c.words[0] not in PROGRAM_CHECKS and c.words[0] not in EXTERNAL]
    assert not unknown, "\n".join(unknown)


def test_every_shown_command_parses_and_passes_its_checks(tmp_path, monkeypatch):
    """Each command of the pages, in reading order (README.md, then docs/ by name) in one folder: the run folders
    that `ragen train` makes are there for the commands that read them. Only what the docs cannot provide is
    skipped: the model folder and the env of `ragen train` (`preflight`, replaced by the trainer's own checks)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.syspath_prepend(str(ROOT))  # `benchmarks` is the checkout's
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    monkeypatch.setattr(train_app, "preflight", lambda cfg: check_runnable(_on_cpu(cfg)))
    failures, checked = [], 0
    for cmd in shown_commands():
        check = PROGRAM_CHECKS.get(cmd.words[0])
        if check is None:
            continue
        problem = check_one(cmd)
        checked += 1
        if problem:
            failures.append(f"{cmd}: {problem}")
    assert not failures, "\n".join(failures)
    assert checked >= 40


WRONG_COMMANDS = {
    "ragen train sokoban_tiny run.stepz=3": "unknown config key run.stepz",
    "ragen train sokoban_tiny run.steps=abc": "run.steps must be an integer",
    "ragen train configs/nope.toml": "not in the repository",
    "ragen export runs/never-trained": "not a run folder",
    "ragen eval runs/sokoban-tiny --episodez 3": "no --episodez",
    "ragen eval --base-url http://127.0.0.1:8000/v1 --model-name M --envs Nope-v0": "unknown env id",
    "ragen reproduce --quick   # 14 runs": "it lists 13",
    "ragen reproduce --envs nope": "unknown env",
    "ragen frobnicate": "no such command",
    "python -m ragen_core.nope": "no module",
    "python scripts/verl/make_env_data.py out --trainz 3": "no --trainz",
    "make demoo": "no target demoo",
    "make test TORCHINDEX=x": "no variable TORCHINDEX",
    "pip install -e '.[trian]'": "no extra trian",
    "pip install torch==2.12.0": "pins torch==2.13.0",
    "python -m verl.trainer.main_ppo +algorithm.ragen_filter.strategi=top_p": "unknown ragen_filter key",
}


@pytest.mark.parametrize("line", list(WRONG_COMMANDS))
def test_the_command_checks_refuse_a_wrong_command(line, tmp_path, monkeypatch):
    """Not vacuous: a misspelt flag, key, file, target, extra or pin, a wrong count in a comment, a run folder
    read before it was trained: each is one line naming it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.setattr(train_app, "preflight", lambda cfg: check_runnable(_on_cpu(cfg)))
    commands = shell_commands(Block("p.md", 1, "bash", line + "\n"))
    assert check_one(shell_commands(Block("p.md", 1, "bash", "ragen train sokoban_tiny\n"))[0]) is None
    problem = check_one(commands[0])
    assert problem is not None and WRONG_COMMANDS[line] in problem, problem


def test_every_inline_command_names_real_commands_flags_modules_and_targets():
    """The commands named in the text (`ragen eval --resume DIR`, `python -m benchmarks.X --flag`, `make X`,
    `pip install ...`): the command, each flag, the module, the target, the extra and the pin exist."""
    failures = []
    targets, _ = makefile_targets()
    for page, span in inline_spans():
        words = span.split()
        if words[0] == "ragen" and len(words) > 1 and not words[1].startswith(("-", ".")):
            if words[1] not in cli.COMMANDS:
                failures.append(f"{page}: `{span}`: no command {words[1]}")
            elif missing_flags(span, ragen_help(words[1])):
                failures.append(f"{page}: `{span}`: `ragen {words[1]} --help` has no "
                                f"{', '.join(missing_flags(span, ragen_help(words[1])))}")
        elif words[:2] == ["python", "-m"] and len(words) > 2 and words[2] not in ("pytest", "venv", "pip"):
            if importlib.util.find_spec(words[2]) is None:
                failures.append(f"{page}: `{span}`: no module {words[2]}")
            elif any(w.startswith("--") for w in words[3:]):
                missing = missing_flags(" ".join(words[3:]), module_help(words[2], leading_words(words[3:])))
                if missing:
                    failures.append(f"{page}: `{span}`: no {', '.join(missing)}")
        elif words[0] == "make" and len(words) > 1 and words[1] not in targets:
            failures.append(f"{page}: `{span}`: the Makefile has no target {words[1]}")
        elif words[:2] == ["pip", "install"]:
            problem = check_pip(Shown(page, shlex.split(span), ""))
            if problem:
                failures.append(f"{page}: `{span}`: {problem}")
        for word in span.split():
            problem = repo_path_problem(word.strip(",;:()"))
            if problem:
                failures.append(f"{page}: `{span}`: {problem}")
    assert not failures, "\n".join(dict.fromkeys(failures))


def test_the_examples_usage_lines_name_their_real_flags():
    """The `python examples/NAME.py --flag ...` lines of each example's docstring: the file and its flags exist."""
    failures, seen = [], 0
    for path in sorted((ROOT / "examples").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        for line in doc.splitlines():
            code, comment = split_comment(line.strip())
            if code.startswith("python examples/"):
                seen += 1
                cmd = Shown(f"examples/{path.name}", shlex.split(code), comment)
                problem = check_one(cmd)
                if problem:
                    failures.append(f"{cmd}: {problem}")
    assert not failures, "\n".join(failures)
    assert seen >= 4


def _config_sections() -> set[str]:
    return {f.name for f in dataclasses.fields(TrainConfig)}


def test_every_inline_override_is_a_config_key_with_a_value_of_its_type():
    """`section.key=value` in the text (`filter.enabled=false`), all of one span together: a real key and a value
    the config accepts; a value in CAPITALS or one letter (`run.seed=S`) is the reader's to choose."""
    failures = []
    for page, span in inline_spans():
        overrides = [m.group(0) for m in re.finditer(r"(?<![\w./-])([a-z_]+)\.[a-z_.]+=[^\s`]+", span)
                     if m.group(1) in _config_sections()]
        if not overrides or any(re.fullmatch(r"[A-Za-z]|[A-Z][A-Z0-9_]*", o.split("=", 1)[1]) for o in overrides):
            continue
        try:
            load_config(None, overrides)
        except Exception as e:  # noqa: BLE001 - the failing span, named
            failures.append(f"{page}: `{span}`: {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures)


def _resolve(dotted: str) -> str | None:
    """Why the dotted name of a project object does not resolve, or None."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            if not hasattr(obj, part):
                return f"{'.'.join(parts[:i])} has no {part}"
            obj = getattr(obj, part)
        return None
    return "no such module"


def test_every_named_project_object_exists(monkeypatch):
    """`ragen_core.x.y`, `ragen_envs.x`, `theory_checks.x`, `benchmarks.x` in the text and the blocks: a module,
    function, class or attribute that exists."""
    monkeypatch.syspath_prepend(str(ROOT))
    texts = [(p, s) for p, s in inline_spans()] + [(b.page, b.text) for b in all_blocks()]
    failures = {}
    for page, text in texts:
        for dotted in re.findall(r"(?<![\w./])((?:ragen_core|ragen_envs|theory_checks|benchmarks)(?:\.[A-Za-z_]\w*)+)",
                                 text):
            if (ROOT / (dotted.replace(".", "/"))).with_suffix("").exists() and dotted.endswith((".py", ".md")):
                continue
            problem = _resolve(dotted.removesuffix(".py"))
            if problem:
                failures.setdefault(f"{page}: {dotted}", problem)
    assert not failures, "\n".join(f"{k}: {v}" for k, v in failures.items())


# ------------------------------------------------------------------------------------------------- Python blocks


def concrete_signature(obj: Any) -> inspect.Signature | None:
    """The signature a call of `obj` binds to: a class's first `__init__` in its MRO that names its parameters
    (a subclass's `(*args, **kwargs)` hands them on), else `obj`'s own."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    only_var = all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values())
    if inspect.isclass(obj) and only_var and sig.parameters:
        for klass in obj.__mro__[1:]:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            inner = inspect.signature(init)
            params = list(inner.parameters.values())[1:]
            if not all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
                return inner.replace(parameters=params)
    return sig


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve here: unknown
        return {}


def _class_of(hint: Any) -> type | None:
    return hint if inspect.isclass(hint) and hint.__module__.split(".")[0] in ("ragen_core", "ragen_envs") else None


def _has_attribute(cls: type, attr: str) -> bool:
    """`attr` is a class attribute, a field, an annotation or an attribute some `__init__` of its MRO sets."""
    if hasattr(cls, attr) or attr in _hints(cls):
        return True
    for klass in cls.__mro__:
        with contextlib.suppress(OSError, TypeError):
            if re.search(rf"\bself\.{attr}\s*[:=]", inspect.getsource(klass)):
                return True
    return False


class BlockChecker(ast.NodeVisitor):
    """The names a Python block uses: each import, each attribute of an imported object, each call of an
    imported callable (its arguments bound to the signature), each attribute of a value whose class the code
    declares (a call's return annotation, a dataclass field's type); override strings, env ids and presets."""

    def __init__(self, where: str):
        self.where = where
        self.objects: dict[str, Any] = {}
        self.types: dict[str, type] = {}
        self.problems: list[str] = []

    def fail(self, node: ast.AST, message: str) -> None:
        self.problems.append(f"{self.where} (block line {getattr(node, 'lineno', '?')}): {message}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            try:
                module = importlib.import_module(alias.name)
            except ImportError as e:
                self.fail(node, f"import {alias.name}: {e}")
                continue
            self.objects[alias.asname or alias.name.split(".")[0]] = (
                module if alias.asname else importlib.import_module(alias.name.split(".")[0]))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        try:
            module = importlib.import_module(node.module or "")
        except ImportError as e:
            self.fail(node, f"from {node.module} import ...: {e}")
            return
        for alias in node.names:
            if not hasattr(module, alias.name):
                self.fail(node, f"{node.module} has no {alias.name}")
            else:
                self.objects[alias.asname or alias.name] = getattr(module, alias.name)

    def value_of(self, node: ast.AST) -> Any:
        """The imported object an expression names (`RolloutSettings.from_config`), or None."""
        if isinstance(node, ast.Name):
            return self.objects.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.value_of(node.value)
            if base is not None:
                if not hasattr(base, node.attr):
                    self.fail(node, f"{ast.unparse(node.value)} has no {node.attr}")
                    return None
                return getattr(base, node.attr)
        return None

    def type_of(self, node: ast.AST) -> type | None:
        """The class of an expression's value where the code declares it, else None."""
        if isinstance(node, ast.Name):
            return self.types.get(node.id)
        if isinstance(node, ast.Call):
            func = self.value_of(node.func)
            if inspect.isclass(func):
                return _class_of(func)
            return _class_of(_hints(func).get("return")) if callable(func) else None
        if isinstance(node, ast.Attribute):
            owner = self.type_of(node.value)
            return _class_of(_hints(owner).get(node.attr)) if owner is not None else None
        return None

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        cls = self.type_of(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                if cls is not None:
                    self.types[target.id] = cls
                else:
                    self.types.pop(target.id, None)
                self.objects.pop(target.id, None)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.generic_visit(node)
        if self.value_of(node.value) is not None:
            return  # checked by value_of when used
        owner = self.type_of(node.value)
        if owner is not None and not _has_attribute(owner, node.attr):
            self.fail(node, f"{ast.unparse(node.value)} (a {owner.__name__}) has no attribute {node.attr}")

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func = self.value_of(node.func)
        if func is None or not callable(func):
            return
        literals = [a.value for a in node.args if isinstance(a, ast.Constant)]
        self.check_strings(node, literals + [e.value for a in node.args if isinstance(a, (ast.List, ast.Tuple))
                                             for e in a.elts if isinstance(e, ast.Constant)])
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return
        sig = concrete_signature(func)
        if sig is None:
            return
        try:
            bound = sig.bind(*node.args, **{k.arg: k.value for k in node.keywords})
        except TypeError as e:
            self.fail(node, f"{ast.unparse(node.func)}({', '.join(k.arg for k in node.keywords)}...): {e}; "
                            f"the signature is {sig}")
            return
        for name, value in bound.arguments.items():
            if name in ("config", "arg") and isinstance(value, ast.Constant) and isinstance(value.value, str):
                from ragen_core.training.presets import resolve_config

                try:
                    resolve_config(value.value)
                except ValueError as e:
                    self.fail(node, f"{name}={value.value!r}: {e}")

    def check_strings(self, node: ast.AST, values: list[Any]) -> None:
        """Override strings (all of one call together), env ids and repository paths among a call's literals."""
        import gymnasium as gym

        strings = [v for v in values if isinstance(v, str)]
        overrides = [s for s in strings if re.fullmatch(r"[a-z_]+\.[a-z_.]+=\S+", s)
                     and s.split(".", 1)[0] in _config_sections()]
        if overrides:
            try:
                load_config(None, overrides)
            except Exception as e:  # noqa: BLE001 - the failing overrides, named
                self.fail(node, f"{overrides}: {type(e).__name__}: {e}")
        for s in strings:
            if re.fullmatch(r"ragen/[\w.-]+", s) and s not in gym.registry:
                self.fail(node, f"{s!r} is not a registered env id")
            problem = repo_path_problem(s)
            if problem:
                self.fail(node, problem)


def test_every_python_block_compiles_and_names_what_exists():
    """Imports, names, signatures, attributes, override strings, env ids and presets of each Python block."""
    import ragen_envs  # noqa: F401 - registers the ragen/ ids the blocks name

    blocks = all_blocks("python")
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for block in blocks:
            where = f"{block.page}:{block.line}"
            try:
                tree = ast.parse(block.text)
            except SyntaxError as e:
                failures.append(f"{where}: {e}")
                continue
            checker = BlockChecker(where)
            for statement in tree.body:
                checker.visit(statement)
            failures += checker.problems
    assert not failures, "\n".join(failures)
    assert sum(1 for b in blocks for n in ast.walk(ast.parse(b.text)) if isinstance(n, ast.Call)) >= 30


def test_the_checker_catches_a_wrong_keyword_attribute_name_and_override():
    """Not vacuous: what each check of the Python blocks refuses."""
    code = ("from ragen_core.integrations.warm import warm_start\n"
            "from ragen_core.training.config import load_config\n"
            "from ragen_core.integrations.trl import RagenGRPOTrainer, seed_dataset\n"
            "from ragen_core.nothing import x\n"
            "ws = warm_start('countdown_tiny', ['warm_start.epochz=2'], cache=1)\n"
            "print(ws.config, ws.konfig)\n"
            "cfg = load_config(None, [])\n"
            "cfg.eval.every = 5\n"
            "cfg.eval.evry = 5\n"
            "RagenGRPOTrainer(model='m', argz=1)\n"
            "seed_dataset(4, begin=1)\n"
            "warm_start('no_such_preset')\n"
            "import gymnasium as gym\n"
            "gym.make('ragen/Nope-v0')\n")
    import ragen_envs  # noqa: F401

    checker = BlockChecker("t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for statement in ast.parse(code).body:
            checker.visit(statement)
    text = "\n".join(checker.problems)
    for expected in ("ragen_core.nothing", "epochz", "cache", "no attribute konfig", "no attribute evry", "argz",
                     "begin", "no_such_preset", "ragen/Nope-v0"):
        assert expected in text, (expected, text)
    assert "ws.config" not in text and "attribute every" not in text


#: RagenGRPOConfig settings that change what is shown or where it goes, not what is trained.
DISPLAY_SETTINGS = {"output_dir", "report_to", "logging_steps", "disable_tqdm", "save_strategy",
                    "dataloader_num_workers", "use_cpu", "bf16", "activation_checkpointing"}


def _config_call(source: str) -> dict[str, ast.expr]:
    """The keyword arguments of the one `RagenGRPOConfig(...)` call of `source`."""
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "RagenGRPOConfig"]
    assert len(calls) == 1, "one RagenGRPOConfig(...) call"
    return {k.arg: k.value for k in calls[0].keywords if k.arg}


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except ValueError:
        return False, None


def test_a_block_that_says_an_example_is_it_trains_as_the_example_does():
    """A page that says `examples/NAME.py` "is this script with flags" shows the example's training: every
    setting the example gives RagenGRPOConfig (other than a display one, or a constant equal to the default) is
    in the block, with the same value where both are constants (the examples' measured results are the block's)."""
    from ragen_core.integrations.trl import RagenGRPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(RagenGRPOConfig)}
    paired = 0
    for page in PAGES:
        text = page.read_text()
        for block in fenced_blocks(page):
            before = "\n".join(text.splitlines()[max(0, block.line - 4):block.line - 1])
            said = re.search(r"`(examples/\w+\.py)`\s+is\s+this\s+script", before)
            if block.lang != "python" or not said:
                continue
            paired += 1
            shown, example = _config_call(block.text), _config_call((ROOT / said.group(1)).read_text())
            for key, node in example.items():
                constant, value = _literal(node)
                if key in DISPLAY_SETTINGS or constant and defaults.get(key) == value:
                    continue
                where = f"{block.page}:{block.line} ({said.group(1)})"
                assert key in shown, f"{where}: the example sets {key}={ast.unparse(node)}; the block does not"
                shown_constant, shown_value = _literal(shown[key])
                if constant and shown_constant:
                    assert shown_value == value, f"{where}: {key}={shown_value!r}; the example's is {value!r}"
    assert paired >= 2


def _env_only(block: Block) -> bool:
    """A block that imports only gymnasium and the envs: it runs in a second, so it runs for real."""
    roots = {(n.module or "").split(".")[0] for n in ast.walk(ast.parse(block.text)) if isinstance(n, ast.ImportFrom)}
    roots |= {a.name.split(".")[0] for n in ast.walk(ast.parse(block.text)) if isinstance(n, ast.Import)
              for a in n.names}
    return bool(roots) and roots <= {"gymnasium", "ragen_envs"}


def test_the_env_blocks_run_and_print_what_their_comments_say():
    """Each env-only Python block runs; a `print(...)  # VALUE: why` line prints VALUE where the comment starts
    with a value (a number) rather than words."""
    blocks = [b for b in all_blocks("python") if _env_only(b)]
    assert blocks, "README.md's env quick start is an env-only block"
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block.text, f"{block.page}:{block.line}", "exec"), {"__name__": "__doc_block__"})
        printed = out.getvalue().splitlines()
        for line in block.text.splitlines():
            code, comment = split_comment(line)
            if code.strip().startswith("print(") and re.match(r"^-?\d", comment):
                claim = comment.split(":", 1)[0].strip()
                where = f"{block.page}:{block.line}"
                assert claim in printed, f"{where}: `{code.strip()}` says {claim!r}; printed: {printed}"


# --------------------------------------------------------------------------------------------------- YAML blocks


def test_every_yaml_block_is_a_config_the_code_accepts(monkeypatch):
    """A TRL config (top-level `output_dir`) parses as RagenGRPOConfig through TrlParser, with no deprecated
    field (a FutureWarning is an error; only its GPU settings are replaced by CPU ones here); a verl `algorithm:`
    section is accepted by the integration's filter and MI parsers (unknown keys are errors there)."""
    import yaml

    blocks = all_blocks("yaml")
    assert blocks
    for block in blocks:
        data = yaml.safe_load(block.text)
        where = f"{block.page}:{block.line}"
        if "algorithm" in data:
            from ragen_core.integrations.verl import core

            core.filter_spec_from_algorithm(data["algorithm"])
            core.mi_settings_from_algorithm(data["algorithm"])
        elif "output_dir" in data:
            check_trl_yaml(block.text, where, monkeypatch)
        else:
            pytest.fail(f"{where}: a YAML block this test does not know how to check: {sorted(data)}")


def check_trl_yaml(text: str, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    trl = pytest.importorskip("trl")
    from ragen_core.integrations.trl import RagenGRPOConfig

    with _tmp_file(text) as path:
        monkeypatch.setattr(sys, "argv", ["sokoban_trl.py", "--config", str(path), "--bf16", "false",
                                          "--use_cpu", "true", "--report_to", "none"])
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            try:
                (args,) = trl.TrlParser((RagenGRPOConfig,)).parse_args_and_config()
            except (FutureWarning, ValueError, SystemExit) as e:
                pytest.fail(f"{where}: {type(e).__name__}: {e}")
    data = __import__("yaml").safe_load(text)
    for key, value in data.items():
        if key not in ("bf16", "use_cpu", "report_to"):
            assert getattr(args, key) == value or str(getattr(args, key)) == str(value), (where, key)


@contextlib.contextmanager
def _tmp_file(text: str) -> Any:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(text)
        yield path
