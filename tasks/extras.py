"""The optional parts of retbench, installed as pip extras (pyproject.toml): what each extra
holds, and the one-line refusal when a spec or a flag needs a part that is not installed. Checked
before any work starts (tasks/stages/preflight.py, the command line's --dask), and again where the
part is imported, so that the Python API gets the same message."""
from __future__ import annotations

import importlib.util

# extra -> the modules it installs, and what in a spec needs it.
EXTRAS = {
    "onnx": (("onnxruntime", "onnx", "onnxscript"), "sentence-transformers on ONNX Runtime (backend: onnx, onnx-int8)"),
    "finetune": (("datasets", "accelerate"), "fine-tuning (kind: finetuned)"),
    "dask": (("prefect_dask", "distributed"), "running on Dask (--dask)"),
}


class MissingExtra(ImportError):
    """A part of retbench that is not installed: an expected failure (one line, exit 2)."""


def installed(extra: str) -> bool:
    modules, _ = EXTRAS[extra]
    return all(importlib.util.find_spec(module) is not None for module in modules)


def require(extra: str, needed_by: str | None = None) -> None:
    """Refuse, in one line naming the extra and the pip command, when `extra` is not installed."""
    modules, purpose = EXTRAS[extra]
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        raise MissingExtra(f"{needed_by or purpose} needs retbench's optional '{extra}' extra, which is not installed "
                           f"(missing: {', '.join(missing)}): pip install 'retbench[{extra}]'")
