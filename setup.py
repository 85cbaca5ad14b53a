"""The package list, which pyproject.toml cannot state: every package under gradsync/ and
runners/, plus the Hydra configs of conf/ installed as gradsync.conf (their directory is mapped
in pyproject.toml's package-dir). Everything else about the build is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

CONFIGS = ["gradsync." + name for name in find_namespace_packages(include=["conf", "conf.*"])]
setup(packages=[*find_namespace_packages(include=["gradsync*", "runners*"]), *CONFIGS])
