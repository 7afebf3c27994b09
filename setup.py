"""The installed package is `retbench`: the folders tasks/, flows/ and support/ of this repository
are its subpackages retbench.tasks, retbench.flows and retbench.support. Nothing is installed
under a top-level name a user's own module could have (a notebook folder's tasks.py, say).
Everything else about the package is in pyproject.toml; this file only lists the packages, which
pyproject.toml's static `packages.find` cannot map to another name."""
from setuptools import find_packages, setup

FOLDERS = ("tasks", "flows", "support")

setup(
    packages=["retbench"] + [f"retbench.{folder}" for folder in FOLDERS]
    + [f"retbench.{folder}.{sub}" for folder in FOLDERS for sub in find_packages(folder)],
    package_dir={"retbench": "retbench", **{f"retbench.{folder}": folder for folder in FOLDERS}},
)
