"""Cheaper variants beside their full version: which providers pair up, the `cheaper_variants`
table's arithmetic by hand, and the table a run on the shipped sample writes."""
import json

import polars as pl
import pytest

from retbench.tasks.analysis.breakdown import paired_comparison
from retbench.tasks.analysis.cheaper import ON_TEST, PAIRED, SUM, SWEEP, cheaper_variants_table
from retbench.tasks.config.cheaper import CheaperVariant, cheaper_variants
from retbench.tasks.config.spec import load_spec
from retbench.support.paths import ROOT


def _spec(tmp_path, providers: str):
    path = tmp_path / "spec.yaml"
    path.write_text(f"name: t\ndataset: {{path: data}}\nproviders:\n{providers}")
    return load_spec(path)


def test_variants_pair_with_the_same_model_at_full_size_and_engine(tmp_path):
    spec = _spec(tmp_path, """
  - {name: minilm, kind: sentence-transformers, options: {batch_size: 32}}
  - {name: minilm-256, kind: sentence-transformers, dimensions: 256}
  - {name: minilm-int8, kind: sentence-transformers, options: {backend: onnx-int8}}
  - {name: minilm-int8-128, kind: sentence-transformers, dimensions: 128, options: {backend: onnx-int8}}
  - {name: other-model-128, kind: sentence-transformers, dimensions: 128, options: {query_prefix: "q: "}}
  - {name: hashing, kind: hashing, options: {dim: 64}}
  - {name: hashing-32, kind: hashing, dimensions: 32}
""")
    assert cheaper_variants(spec) == [
        CheaperVariant("minilm-256", "minilm", "dimensions 256", False),
        CheaperVariant("minilm-int8", "minilm", "backend onnx-int8", True),
        CheaperVariant("minilm-int8-128", "minilm", "dimensions 128, backend onnx-int8", True),
        # another prefix is another model setting, and hashing-32 cuts the default 1,024-dim hashing,
        # not the 64-dim one: no full version in this spec
    ]


def _per_query(provider: str, values: dict[str, list[float]]) -> pl.DataFrame:
    rows = [(provider, "flat", None, f"q{i}", m, v) for m, vs in values.items() for i, v in enumerate(vs)]
    return pl.DataFrame(rows, schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64,
                                      "query_id": pl.String, "measure": pl.String, "value": pl.Float64}, orient="row")


def _sweep_row(provider, kind, build, query, bpv, flat_ndcg, delta, low, high):
    return {"provider": provider, "index_kind": kind, "build_params": json.dumps(build), "query_params": json.dumps(query),
            "bytes_per_vector": bpv, "rescore_bytes_per_vector": 4 * 8 if query.get("rescore") else 0,
            "index_bytes": int(bpv * 4), "flat_ndcg@10": flat_ndcg, "delta_ndcg@10": delta,
            "delta_ndcg@10_ci_low": low, "delta_ndcg@10_ci_high": high}


def test_table_by_hand():
    per_query = pl.concat([_per_query("full", {"ndcg@10": [1.0, 0.5, 0.0, 0.5]}),
                           _per_query("half", {"ndcg@10": [0.5, 0.5, 0.0, 0.25]})])
    storage = pl.DataFrame({"provider": ["full", "half", "full"], "vectors": [4, 4, 4], "dim": [8, 4, 8],
                            "index": ["flat", "flat", "ivf_nlist-2"], "index_bytes": [173, 109, 999],
                            "index_bytes_per_vector": [173 / 4, 109 / 4, 999 / 4]})
    sweep = pl.DataFrame([
        _sweep_row("full", "ivf", {"nlist": 2}, {"nprobe": 1}, 60.0, 0.5, -0.1, -0.2, 0.0),  # not a compressed kind
        _sweep_row("full", "sq", {"qtype": "8bit"}, {}, 8.0, 0.5, -0.05, -0.1, 0.0),
        _sweep_row("half", "binary", {}, {"rescore": 0}, 0.5, 0.3125, -0.0625, -0.125, 0.0),
    ])
    latency = pl.DataFrame({"provider": ["full", "full", "half"], "batch_size": [1, 10, 10], "concurrency": [1, 1, 1],
                            "texts_per_second": [5.0, 50.0, 100.0]})
    variants = [CheaperVariant("half", "full", "dimensions 4", False)]
    table = cheaper_variants_table(per_query, storage, variants, ["full", "half"], ["ndcg@10"], sweep=sweep,
                                   latency=latency, project_vectors=1_000_000, resamples=200, permutations=200)
    rows = {(r["provider"], r["index"]): r for r in table.iter_rows(named=True)}
    assert list(rows) == [("full", "flat"), ("full", "sq"), ("half", "flat"), ("half", "binary")]
    full, sq, half, binary = rows.values()
    assert (full["change"], full["delta_ndcg@10"], full["delta_basis"]) == ("full", 0.0, None)
    assert full["ndcg@10"] == pytest.approx(0.5) and half["ndcg@10"] == pytest.approx(0.3125)
    # mean of (0.5-1, 0.5-0.5, 0-0, 0.25-0.5) = -0.1875, the same paired comparison as the comparisons table
    expected = paired_comparison(per_query, ("half", "flat", None), ("full", "flat", None), 200, 200).row(0, named=True)
    assert half["delta_ndcg@10"] == pytest.approx(-0.1875) == expected["diff"]
    assert (half["delta_ndcg@10_ci_low"], half["delta_ndcg@10_ci_high"]) == (expected["ci_low"], expected["ci_high"])
    assert half["p_value_ndcg@10"] == expected["p_value"] and half["delta_basis"] == PAIRED
    # the full model's compressed index: the sweep's delta and interval, measured against itself
    assert (sq["delta_ndcg@10"], sq["delta_ndcg@10_ci_low"], sq["delta_basis"]) == (-0.05, -0.1, SWEEP)
    assert sq["ndcg@10"] == pytest.approx(0.45) and sq["index_params"] == '{"qtype":"8bit"}'
    # a variant's compressed index: the two means add, no interval is claimed
    assert binary["delta_ndcg@10"] == pytest.approx(-0.1875 - 0.0625) and binary["delta_ndcg@10_ci_low"] is None
    assert binary["delta_basis"] == SUM and binary["full_version"] == "full"
    # bytes: flat from the file on disk, compressed from the sweep; projected to a million vectors
    assert full["bytes_per_vector"] == 173 / 4 and full["projected_index_bytes"] == pytest.approx(173 / 4 * 1e6)
    assert binary["bytes_per_vector"] == 0.5 and binary["projected_index_bytes"] == 500_000
    assert binary["rescore_bytes_per_vector"] == 0 and binary["projected_vectors"] == 1_000_000
    # texts/s at the largest batch; a ratio only where the engine changed (truncation encodes the same)
    assert (full["texts_per_second"], half["texts_per_second"]) == (50.0, 100.0)
    assert half["texts_per_second_vs_full"] is None
    engine = [CheaperVariant("half", "full", "backend onnx-int8", True)]
    again = cheaper_variants_table(per_query, storage, engine, ["full", "half"], ["ndcg@10"], latency=latency,
                                   resamples=200, permutations=200)
    assert again.filter(pl.col("provider") == "half")["texts_per_second_vs_full"].to_list() == [2.0]
    assert again["projected_index_bytes"].to_list() == [None, None]  # no N in the spec, no projection


SAMPLE_SPEC = """
name: cheap
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers:
  - {{name: hashing, kind: hashing, options: {{dim: 256}}}}
  - {{name: hashing-64, kind: hashing, options: {{dim: 256}}, dimensions: 64}}
indexes: {{ivf: null}}
sweep: {{ivf: null, hnsw: null, ivfpq: null, sq: {{qtype: [fp16, 8bit]}}, binary: {{rescore: [0, 20]}},
         project_vectors: 1000000, repeats: 1, latency_queries: 5, bootstrap: 100}}
latency: {{batch_sizes: [8], iterations: 1, texts: 16}}
statistics: {{resamples: 200, permutations: 200}}
history: {{enabled: false}}
output_dir: {out}
store_dir: {store}
"""


def test_a_sample_run_writes_every_cheaper_variant_with_its_costs(tmp_path):
    from retbench.tasks.pipeline import run_pipeline

    (tmp_path / "spec.yaml").write_text(SAMPLE_SPEC.format(data=ROOT / "data" / "sample", out=tmp_path / "out",
                                                           store=tmp_path / "store"))
    run_pipeline(load_spec(tmp_path / "spec.yaml"))
    table = pl.read_parquet(tmp_path / "out" / "cheaper_variants.parquet")
    assert (tmp_path / "out" / "cheaper_variants.csv").exists()
    settings = [(r["provider"], r["index"], json.loads(r["index_params"]).get("qtype", json.loads(r["index_params"]).get("rescore")))
                for r in table.iter_rows(named=True)]
    per_provider = [("flat", None), ("sq", "fp16"), ("sq", "8bit"), ("binary", 0), ("binary", 20)]
    assert settings == [(p, i, q) for p in ("hashing", "hashing-64") for i, q in per_provider]
    assert table["full_version"].unique().to_list() == ["hashing"]
    assert table.filter(pl.col("provider") == "hashing-64")["change"].unique().to_list() == ["dimensions 64"]
    vectors = table["vectors"][0]
    for row in table.iter_rows(named=True):
        dim = 256 if row["provider"] == "hashing" else 64
        per_vector = {"flat": 4 * dim, "sq": (2 if "fp16" in row["index_params"] else 1) * dim, "binary": dim / 8}[row["index"]]
        # the file's header is spread over the vectors: a few bytes each on the sample
        assert per_vector <= row["bytes_per_vector"] < per_vector + 100_000 / vectors, row
        assert row["projected_index_bytes"] == pytest.approx(row["bytes_per_vector"] * 1_000_000)
        assert row["rescore_bytes_per_vector"] == (4 * dim if row["index_params"] == '{"rescore":20}' else 0)
        assert row["texts_per_second"] > 0 and row["texts_per_second_vs_full"] is None  # truncation: same encoder
        assert row["ndcg@10"] is not None and row["recall@10"] is not None
    # the truncated model's exact search against the full one's, as the score stage pairs them, on the
    # held-out test queries only (the sample has dev and test)
    per_query = pl.read_parquet(tmp_path / "out" / "per_query.parquet")
    assert per_query["split"].unique().sort().to_list() == ["dev", "test"]
    per_query = per_query.filter(pl.col("split") == "test")
    expected = paired_comparison(per_query.filter(pl.col("measure").is_in(["ndcg@10", "recall@10"])),
                                 ("hashing-64", "flat", None), ("hashing", "flat", None), 200, 200)
    flat64 = table.filter((pl.col("provider") == "hashing-64") & (pl.col("index") == "flat")).row(0, named=True)
    for measure in ("ndcg@10", "recall@10"):
        want = expected.filter(pl.col("measure") == measure).row(0, named=True)
        assert flat64[f"delta_{measure}"] == pytest.approx(want["diff"]) and flat64[f"p_value_{measure}"] == want["p_value"]
    assert flat64["delta_ndcg@10"] != 0  # hashing's 64-dim prefix does lose quality on the sample
    assert flat64["delta_basis"] == PAIRED + ON_TEST and flat64["delta_queries"] == per_query["query_id"].n_unique()
    assert set(table.filter(pl.col("index") != "flat")["delta_basis"]) == {SWEEP + ON_TEST, SUM + ON_TEST}
    # ... and the report shows the table, a row per setting, with the delta the table holds
    report = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    section = report[report.index('<h2 id="cheaper">'):]
    section = section[:section.index("<h2", 4)] if "<h2" in section[4:] else section
    assert section.count("<tr>") == 1 + table.height
    assert "dimensions 64" in section and '{&quot;qtype&quot;:&quot;8bit&quot;' in section
    assert f'<td class="num">{flat64["delta_ndcg@10"]:.4f}</td>' in section
    assert "index at 1,000,000" in section
