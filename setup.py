"""Packaging beyond pyproject.toml: ship fixtures/ (the verification scenarios) as the package
``gradfix.fixtures``, from its one place in the repository."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["gradfix*"]), "gradfix.fixtures"],
    package_dir={"gradfix.fixtures": "fixtures"},
)
