"""Packaging beyond pyproject.toml: the checkout's `configs/` ships in the wheel as the package data folder
`ragen_core/_configs/` (read by `ragen_core.training.presets`). The configs stay at `configs/` in the repository, where
the docs and the tests name them; this mapping is the only copy step, done by setuptools at build time.
Everything else (metadata, dependencies, extras) is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

setup(
    packages=find_namespace_packages(include=["ragen_envs*", "ragen_core*", "theory_checks*"])
    + ["ragen_core._configs"],
    package_dir={"ragen_core._configs": "configs"},
    package_data={"ragen_core._configs": ["*.toml"]},
)
