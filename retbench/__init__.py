"""retbench: which embedding setup retrieves the right documents on your data, at what latency and
cost, and what the approximate index loses.

    import retbench
    results = retbench.run("specs/sample.yaml", providers={"mine": my_model})   # a function or a model object
    results.verdict, results.summary, results.report
    retbench.evaluate("qrels.txt", "run.trec", ["ndcg@10", "recall@100"])      # trec_eval's numbers, as a frame

Importing this package is cheap: no Prefect, no torch, no numpy until a function needs them.
Plug-ins register kinds with `register_provider`, `register_reranker`, `register_index_kind` and
`register_dataset_format` (or through the `retbench.plugins` entry-point group).
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["run", "load", "evaluate", "Results", "Interrupted", "UserCodeError", "SpecError", "__version__",
           "register_provider", "register_reranker", "register_index_kind", "register_dataset_format",
           "Provider", "IndexKind", "Parameter", "FormatReader"]

# name -> (module, attribute): imported on first use.
_LAZY = {
    "run": ("retbench.api", "run"),
    "load": ("retbench.api", "load"),
    "evaluate": ("retbench.api", "evaluate"),
    "Results": ("retbench.results", "Results"),
    "Interrupted": ("retbench.tasks.progress", "Interrupted"),
    "UserCodeError": ("retbench.tasks.user_code", "UserCodeError"),
    "SpecError": ("retbench.tasks.config.spec", "SpecError"),
    "register_provider": ("retbench.tasks.providers", "register"),
    "register_reranker": ("retbench.tasks.rerankers", "register"),
    "register_index_kind": ("retbench.tasks.indexes", "register"),
    "register_dataset_format": ("retbench.tasks.datasets", "register"),
    "Provider": ("retbench.tasks.providers.base", "Provider"),
    "IndexKind": ("retbench.tasks.indexes.base", "IndexKind"),
    "Parameter": ("retbench.tasks.indexes.base", "Parameter"),
    "FormatReader": ("retbench.tasks.datasets.reader", "FormatReader"),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("retbench")
        except PackageNotFoundError:
            return "unknown"
    if name not in _LAZY:
        raise AttributeError(f"module 'retbench' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
