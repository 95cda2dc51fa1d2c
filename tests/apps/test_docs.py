"""The front door stays a front door: the README is short, lists every command, and the generated pages are what
their generators print."""

from __future__ import annotations

import re
from pathlib import Path

from ragen_core.apps.cli import COMMANDS
from ragen_core.apps.envs import markdown_table
from ragen_core.training import metrics

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_is_short_and_lists_every_command():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    table = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    for name in COMMANDS:
        assert f"`ragen {name}" in table, name


def test_the_env_page_is_generated_from_the_registry():
    text = (ROOT / "docs" / "envs.md").read_text()
    block = text.split("-->\n", 1)[1].split("<!-- envs:end -->", 1)[0]
    assert block == markdown_table(), "docs/envs.md is stale: regenerate it with `ragen envs --markdown`"


def test_the_metrics_table_is_generated_from_the_schema():
    text = (ROOT / "docs" / "train.md").read_text()
    block = text.split("<!-- metrics:start", 1)[1].split("-->\n", 1)[1].split("<!-- metrics:end -->", 1)[0]
    assert block == metrics.markdown_table(), (
        "docs/train.md is stale: regenerate its metrics block with `python -m ragen_core.training.metrics`")


def test_every_relative_link_of_the_readme_and_docs_resolves():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to a missing {target}"
