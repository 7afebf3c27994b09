import pytest

from retbench.support.paths import ROOT

from retbench.tasks.config.spec import SpecError, load_spec


def _write(tmp_path, text):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


MINIMAL = """
name: t
dataset: {path: data, format: jsonl}
providers: [{name: h, kind: hashing}]
"""


def test_defaults_and_paths_resolved_against_the_spec_folder(tmp_path):
    spec = load_spec(_write(tmp_path, MINIMAL))
    assert spec.k == [5, 10, 20]
    assert spec.dataset.split == "all"  # every query, each scored under its own split
    assert spec.dataset.path == (tmp_path / "data").resolve()
    assert spec.store_dir == str((tmp_path / ".store").resolve())
    assert spec.indexes.flat and spec.indexes.ivf.nprobe == [1, 4, 16]


@pytest.mark.parametrize("indexes, ivf_on", [
    ("", True),                                           # no indexes: section: flat and IVF
    ("indexes: {flat: true}\n", False),                   # flat named alone: flat only (issue 35)
    ("indexes: {flat: true, hnsw: true}\n", False),
    ("indexes: {flat: true, ivf: {nprobe: [1]}}\n", True),
    ("indexes: {ivf: null}\n", False),
    ("indexes: {shards: 2}\n", True),                     # names neither: IVF as by default
    ("indexes: {hnsw: true}\n", True),
])
def test_ivf_is_on_unless_turned_off_or_flat_is_named_without_it(tmp_path, indexes, ivf_on):
    spec = load_spec(_write(tmp_path, MINIMAL + indexes))
    assert (spec.indexes.ivf is not None) == ivf_on


def test_flat_alone_plans_no_ivf_and_says_so_as_a_choice_not_a_warning(tmp_path):
    from retbench.tasks.stages.index import IVF_OFF, plan_indexes

    spec = load_spec(_write(tmp_path, MINIMAL + "indexes: {flat: true}\n"))
    plan = plan_indexes(spec.indexes.flat, spec.indexes.ivf, 500)  # 500 vectors: nlist 12, nprobe 16 would be clipped
    assert [s.kind for s in plan.settings] == ["flat"]
    assert plan.notes == plan.chosen == (IVF_OFF,)  # logged at INFO: nothing was changed or skipped
    clipped = plan_indexes(True, load_spec(_write(tmp_path, MINIMAL)).indexes.ivf, 500)
    assert [s.kind for s in clipped.settings] == ["flat", "ivf"] and clipped.chosen == ()
    assert any("nprobe [16] exceed nlist=" in note for note in clipped.notes)


def test_unknown_key_is_named(tmp_path):
    with pytest.raises(SpecError, match=r"chunking\.strategyy: unknown key"):
        load_spec(_write(tmp_path, MINIMAL + "chunking: {strategyy: fixed}\n"))


@pytest.mark.parametrize("extra, message", [
    ("k: [0, 10]\n", "k: k must be a non-empty list of positive integers"),
    ("chunking: {strategy: fixed, size: 10, overlap: 10}\n", "overlap (10) must be smaller than chunking.size (10)"),
    ("indexes: {ivf: {nprobe: []}}\n", "nprobe must be a non-empty list"),
    ("depth: 5\n", "k: 20 is above depth (5): a run retrieves 5 documents per query; raise depth to at least 20"),
])
def test_bad_values_are_explained(tmp_path, extra, message):
    with pytest.raises(SpecError) as error:
        load_spec(_write(tmp_path, MINIMAL + extra))
    assert message in str(error.value)
    assert str(tmp_path / "spec.yaml") in str(error.value)


RERANKED = MINIMAL + """rerankers: [{name: r, kind: embedding-rescore, options: {provider: hashing}}]
lexical: [{name: b}]
"""


def test_cutoffs_deeper_than_the_retrieval_are_refused_with_their_key_paths_and_the_other_errors(tmp_path):
    systems = """systems:
  - {name: ok, first: h/flat, rerank: r, top_n: 20}
  - {name: big, first: h/flat, rerank: r, top_n: 500}
  - {name: defaulted, first: h/flat, rerank: r}
  - {name: fused, first: "bm25:b", second: h/flat, fusion: {depth: 10}, rerank: r, top_n: 15}
  - {name: on-fused, first: fused, rerank: r, top_n: 12}
k: [5, 10, 50]
depth: 20
providers: [{name: h, kind: hashing, options: {bogus: 1}}]
"""
    with pytest.raises(SpecError) as error:
        load_spec(_write(tmp_path, RERANKED.replace("providers: [{name: h, kind: hashing}]\n", "") + systems))
    lines = [line.strip() for line in str(error.value).splitlines()[1:]]
    assert lines == [
        "k: 50 is above depth (20): a run retrieves 20 documents per query; raise depth to at least 50 or drop the cutoff",
        "systems[1].top_n: 500 is above the spec's depth (20): only 20 documents per query reach the reranker; "
        "set top_n to at most 20 or raise the depth",
        "systems[2].top_n: 100 (the default) is above the spec's depth (20): only 20 documents per query reach the "
        "reranker; set top_n to at most 20 or raise the depth",
        "systems[3].fusion.depth: 10 is below the largest k (50): the fused ranking would be scored deeper than it "
        "goes; set it to at least 50",
        "systems[3].top_n: 15 is above its fusion's depth (10): only 10 documents per query reach the reranker; "
        "set top_n to at most 10 or raise the depth",
        "systems[4].top_n: 12 is above the depth of system 'fused' (10): only 10 documents per query reach the "
        "reranker; set top_n to at most 10 or raise the depth",
        "providers[0].options.bogus: unknown key (expected one of: dim, word_ngrams, char_ngrams, lowercase)",
    ]


def test_unknown_provider_kind_and_duplicate_names(tmp_path):
    with pytest.raises(SpecError, match=r"providers\[0\]\.kind: unknown provider kind 'bert' \(known: "):
        load_spec(_write(tmp_path, "name: t\ndataset: {path: d}\nproviders: [{name: x, kind: bert}]\n"))
    with pytest.raises(SpecError, match=r"providers\[1\]\.name: 'h' repeats providers\[0\]\.name"):
        load_spec(_write(tmp_path, "name: t\ndataset: {path: d}\nproviders: [{name: h, kind: hashing}, {name: h, kind: hashing}]\n"))


def test_not_a_mapping_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match="expected a mapping"):
        load_spec(_write(tmp_path, "- a\n- b\n"))
    with pytest.raises(SpecError, match="spec file not found"):
        load_spec(tmp_path / "nope.yaml")


def test_shipped_specs_are_valid():
    for path in (ROOT / "specs").glob("*.yaml"):
        load_spec(path)


def test_report_primary_measure_defaults_and_must_be_scored(tmp_path):
    spec = load_spec(_write(tmp_path, MINIMAL))
    assert (spec.primary_measure, spec.primary_measure_defaulted, spec.report.primary_measure) == ("ndcg@10", True, None)
    chosen = load_spec(_write(tmp_path, MINIMAL + "report: {primary_measure: recall@20}\n"))
    assert (chosen.primary_measure, chosen.primary_measure_defaulted) == ("recall@20", False)
    # ndcg@50 is a real measure, but with k = [5, 10, 20] the run never scores it.
    with pytest.raises(SpecError, match=r"report\.primary_measure: 'ndcg@50' is not scored by this spec \(with k=\[5, 10, 20\]"):
        load_spec(_write(tmp_path, MINIMAL + "report: {primary_measure: ndcg@50}\n"))
    with pytest.raises(SpecError, match=r"report\.primary_measurre: unknown key"):
        load_spec(_write(tmp_path, MINIMAL + "report: {primary_measurre: mrr}\n"))


@pytest.mark.parametrize("ks, expected", [
    ("[5]", "ndcg@5"),           # the only cutoff
    ("[5, 20]", "ndcg@5"),       # 5 is 5 from 10, 20 is 10 from it
    ("[5, 15]", "ndcg@15"),      # as near: the larger, which looks deeper
    ("[1, 3, 12, 100]", "ndcg@12"),
    ("[10, 20]", "ndcg@10"),
])
def test_primary_measure_defaults_to_ndcg_at_the_cutoff_nearest_10(tmp_path, ks, expected):
    spec = load_spec(_write(tmp_path, MINIMAL + f"k: {ks}\n"))
    assert spec.primary_measure == expected and spec.primary_measure_defaulted


def test_a_primary_measure_error_does_not_hide_the_other_errors(tmp_path):
    # k: [5] alone is a valid spec: nothing refused over a key the user never wrote.
    unknown_option = "providers: [{name: h, kind: hashing, options: {dimm: 8}}]\nk: [5]\n"
    with pytest.raises(SpecError) as error:
        load_spec(_write(tmp_path, MINIMAL.replace("providers: [{name: h, kind: hashing}]\n", unknown_option)))
    assert "providers[0].options.dimm: unknown key" in str(error.value)
    # A primary measure the spec does not score is reported beside the other error, not instead of it.
    with pytest.raises(SpecError) as error:
        load_spec(_write(tmp_path, MINIMAL.replace("providers: [{name: h, kind: hashing}]\n", unknown_option)
                         + "report: {primary_measure: ndcg@10}\n"))
    assert "providers[0].options.dimm: unknown key" in str(error.value)
    assert "report.primary_measure: 'ndcg@10' is not scored by this spec (with k=[5]" in str(error.value)
