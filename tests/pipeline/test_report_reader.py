"""The report read the way a reader reads it: rendered in headless Chromium at 1280 px, it must
not scroll sideways, must carry the sections and figures the run supports (and no others), and
its verdict must name the setting a constructed case makes the right answer.

Set RETBENCH_SCREENSHOTS=<folder> to keep the full-page screenshots for a look.
"""
import base64
import json
import os
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from retbench.tasks.reporting.html import build_report
from retbench.tasks.reporting.publish import Published, verdict_markdown
from retbench.tasks.reporting.verdict import decide, verdict_sentences
from retbench.support.paths import ROOT
from retbench.support.headless import CHROMIUM, Chromium

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")
VIEWPORT = 1280
FACTS = """JSON.stringify({
  scrollWidth: document.documentElement.scrollWidth,
  viewport: window.innerWidth,
  headings: [...document.querySelectorAll('h2')].map(h => h.textContent),
  subheadings: [...document.querySelectorAll('h3')].map(h => h.textContent),
  figures: [...document.querySelectorAll('figure img, figure svg')].map(i => i.getAttribute('alt') || i.getAttribute('aria-label')),
  broken: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).length,
  verdict: (document.querySelector('.verdict') || {}).textContent || '',
  regressions: (document.querySelector('#regressions') || {nextElementSibling: null}).nextElementSibling?.textContent || ''
})"""


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed")
    with Chromium() as chromium:
        yield chromium


def read(browser, html_path: Path, name: str, tmp_path: Path) -> dict:
    page = browser.open(html_path.as_uri(), width=VIEWPORT)
    facts = json.loads(page.evaluate(FACTS))
    keep = os.environ.get("RETBENCH_SCREENSHOTS")
    folder = Path(keep) if keep else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(folder / f"{name}.png")
    return facts


def run_flow(base: Path, name: str, data: Path, providers: str, extra: str = "", store: Path | None = None) -> Path:
    from retbench.flows.benchmark import benchmark

    spec = base / f"{name}.yaml"
    spec.write_text(f"""
name: {name}
dataset: {{path: {data}, format: jsonl, split: all}}
chunking: {{strategy: paragraph, max_words: 120}}
providers: {providers}
output_dir: {base / name}
store_dir: {store or base / 'store'}
{extra}
""")
    return Path(benchmark(str(spec)))


# --- (a) the shipped sample, three providers ----------------------------------------------------

THREE = """
  - {name: words, kind: hashing, options: {dim: 256, word_ngrams: 1, char_ngrams: [4, 4]}}
  - {name: grams, kind: hashing}
  - {name: priced, kind: hashing, options: {dim: 512}, pricing: {usd_per_million_tokens: 0.02, price_date: 2026-11-01}}
"""
SAMPLE_EXTRAS = """
indexes: {ivf: {nprobe: [1, 4]}}
sweep: {ivf: {nprobe: [1, 4]}, hnsw: {ef_search: [16, 64]}, ivfpq: null, repeats: 1, latency_queries: 20, bootstrap: 100}
latency: {batch_sizes: [1, 8], iterations: 1, texts: 20}
"""


@pytest.fixture(scope="module")
def sample_out(tmp_path_factory, prefect_harness):
    base = tmp_path_factory.mktemp("sample")
    return run_flow(base, "sample3", ROOT / "data" / "sample", THREE, SAMPLE_EXTRAS)


@needs_chromium
def test_sample_report_reads_top_down_without_sideways_scroll(sample_out, browser, tmp_path):
    facts = read(browser, sample_out / "report.html", "sample-three-providers", tmp_path)
    assert facts["scrollWidth"] <= facts["viewport"] == VIEWPORT
    assert facts["headings"] == ["Verdict", "Interventions ladder", "Quality against cost, latency and size",
                                 "Tuning evidence (not held out)", "Regressions", "Where it fails",
                                 "Data audit", "Languages and categories", "Approximate search", "Cheaper variants",
                                 "Cost, latency and storage", "Metadata filters"]  # compressed indexes, filtered queries
    assert facts["figures"] == ["ndcg@10 per setting", "test gain against added latency per intervention",
                                "quality against cost, latency and index size",
                                "language pair matrix", "categories", "recall against speed"]
    assert facts["broken"] == 0
    verdict = decide(sample_out, "ndcg@10")
    assert f"Best setting by ndcg@10: {verdict.best['label']}," in facts["verdict"]
    assert facts["verdict"].startswith("Held-out verdict: drawn on the 55 test queries only")
    assert verdict.settings["n"].unique().to_list() == [55]
    assert verdict.settings.height == 3 * 3  # flat + ivf at two nprobes, per provider
    assert "No earlier run of this spec" in facts["regressions"]
    # Failures grouped by class, each class heading with its count.
    assert any(h.startswith("Misranked") or h.startswith("Absent") for h in facts["subheadings"])


def test_sample_report_trims_cost_table_and_names_prices(sample_out):
    html = (sample_out / "report.html").read_text()
    cost_table = html.split("Cost ledger")[1].split("</table>")[0]
    # Only the priced provider has money columns; columns empty in every row are gone.
    assert "$ / 1k queries" in cost_table and "projected $" in cost_table
    assert "$ saved by cache" in cost_table  # 0.0 for the priced provider is a value
    assert "usd_per_million_tokens" not in cost_table and "corpus_texts" not in cost_table  # trimmed to the decision columns
    markdown = (sample_out / "report.md").read_text()
    assert markdown.startswith("# retbench: sample3") and "## Verdict" in markdown and "## Where it fails" in markdown


# --- (b) one provider, one language -----------------------------------------------------------


def english_only(target: Path) -> Path:
    """Twelve English documents, six English queries with judgments: one language pair."""
    target.mkdir(parents=True, exist_ok=True)
    topics = ["password reset", "billing invoice", "webhook retries", "api rate limit", "team roles", "log export",
              "custom domain", "deploy rollback", "sso login", "usage alerts", "data retention", "audit trail"]
    corpus = [{"id": f"d{i:02d}", "title": t.title(), "text": f"How to handle {t} in the dashboard. {t} settings.", "language": "en"}
              for i, t in enumerate(topics)]
    queries = [{"id": f"q{i}", "text": f"{topics[i]} help", "language": "en", "category": "keyword" if i % 2 else "natural"}
               for i in range(6)]
    qrels = [{"query_id": f"q{i}", "doc_id": f"d{i:02d}", "grade": 2} for i in range(6)]
    qrels += [{"query_id": "q0", "doc_id": "d08", "grade": 1}]
    for name, rows in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        (target / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return target


@needs_chromium
def test_single_provider_single_language_report(tmp_path_factory, prefect_harness, browser, tmp_path):
    base = tmp_path_factory.mktemp("single")
    out = run_flow(base, "single", english_only(base / "data"), "[{name: lexical, kind: hashing}]", "indexes: {ivf: null}")
    facts = read(browser, out / "report.html", "single-provider-single-language", tmp_path)
    assert facts["scrollWidth"] <= facts["viewport"]
    assert "language pair matrix" not in facts["figures"]  # one pair: no matrix
    assert "Approximate search" not in facts["headings"] and "Trend across runs" not in facts["headings"]
    assert "Best setting by ndcg@10: lexical flat" in facts["verdict"]
    assert "only setting" in facts["verdict"]
    assert "One language pair in this data set" in (out / "report.html").read_text()


# --- (c) a run with a regression --------------------------------------------------------------


@needs_chromium
def test_regression_report_lists_only_regressed_rows_worst_first(tmp_path_factory, prefect_harness, browser, tmp_path):
    base = tmp_path_factory.mktemp("regress")
    data = ROOT / "data" / "sample"
    good = "[{name: lexical, kind: hashing}]"
    worse = "[{name: lexical, kind: hashing, options: {dim: 16, word_ngrams: 1, char_ngrams: [5, 5]}}]"
    run_flow(base, "drift", data, good, "indexes: {ivf: null}")
    out = run_flow(base, "drift", data, worse, "indexes: {ivf: null}")
    regressions = pl.read_parquet(out / "regressions.parquet")
    flagged = regressions.filter(pl.col("regression"))
    assert flagged.height >= 1
    facts = read(browser, out / "report.html", "regression", tmp_path)
    assert facts["scrollWidth"] <= facts["viewport"]
    assert f"{flagged.height} regression(s) against the previous run" in facts["regressions"]
    html = (out / "report.html").read_text()
    section = html.split('id="regressions"')[1].split("<h2")[0]
    assert section.count("<tr>") == 1 + flagged.height  # header + only the regressed rows
    worst_first = flagged.sort("diff")["measure"].to_list()
    positions = [section.index(f"<td>{m}</td>") for m in worst_first]
    assert positions == sorted(positions)
    assert "Trend across runs" in facts["headings"] and "trend" in facts["figures"]


# --- the verdict on a case built so the answer is known ----------------------------------------


def constructed_run(out: Path, runner_gap: float = 0.02) -> None:
    """Four settings on 40 queries: `strong` best; `close` a little worse on every query (so the
    paired test finds it) but within the best's interval and cheaper; `cheap` cheapest of all but
    outside the interval; `bm25` a non-FAISS system with no cost, latency or storage rows."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    base = np.clip(rng.normal(0.8, 0.15, 40), 0, 1)
    values = {("strong", "flat", None): base, ("close", "flat", None): base - runner_gap,
              ("cheap", "flat", None): base - 0.3, ("bm25", "bm25", None): base - 0.25}
    per_query = pl.DataFrame([
        (p, i, n, f"q{j:02d}", "ndcg@10", float(v), "en", "cat", "dev")
        for (p, i, n), vs in values.items() for j, v in enumerate(vs)
    ], schema={"provider": pl.String, "index": pl.String, "nprobe": pl.Int64, "query_id": pl.String, "measure": pl.String,
               "value": pl.Float64, "query_language": pl.String, "category": pl.String, "split": pl.String}, orient="row")
    per_query.write_parquet(out / "per_query.parquet")
    summary = per_query.group_by("provider", "index", "nprobe", "measure", maintain_order=True).agg(
        value=pl.col("value").mean(), queries=pl.len())
    summary.write_parquet(out / "summary.parquet")
    # Intervals: +-0.05 around each mean.
    summary.select("provider", "index", "nprobe", slice_kind=pl.lit("all"), slice=pl.lit("all"), measure="measure",
                   mean="value", ci_low=pl.col("value") - 0.05, ci_high=pl.col("value") + 0.05,
                   n=pl.col("queries").cast(pl.Int64)).write_parquet(out / "breakdown.parquet")
    pl.DataFrame({"provider": ["strong", "close", "cheap"], "usd_per_1000_queries": [0.10, 0.02, 0.01]}).write_parquet(out / "cost.parquet")


def test_verdict_names_the_best_and_refuses_a_cheaper_setting_beyond_the_margin(tmp_path):
    constructed_run(tmp_path)
    verdict = decide(tmp_path, "ndcg@10")
    assert verdict.best["label"] == "strong flat"
    assert verdict.runner_up["label"] == "close flat"
    # close flat is 0.02 worse on every query: within the best's interval, but beyond the 0.01 margin.
    assert verdict.as_good_and_cheaper is None and verdict.cheapest["label"] == "strong flat"
    assert verdict.versus_runner_up.diff == pytest.approx(0.02)
    assert verdict.versus_runner_up.significant  # the same 0.02 on every query
    words = " ".join(verdict_sentences(verdict))
    assert words.startswith("Only one split is judged in this run (dev, 40 queries)")
    assert "Best setting by ndcg@10: strong flat" in words and "significantly better than the runner-up, close flat" in words
    assert "No cheaper setting matches the best" in words and "the closest, close flat, is cheaper on $ per 1,000 queries" in words
    assert "$0.1000 per 1,000 queries" in words  # what the best costs
    html_path, md_path = build_report(tmp_path, "constructed")
    html = html_path.read_text()
    assert "bm25 bm25" in html  # a non-FAISS row is listed with its empty cost and latency
    published = Published(html=str(html_path), markdown=str(md_path), regressions_path=None, regressions=0,
                          previous_run=None, baseline_run=None, verdict=" ".join(verdict_sentences(verdict)))
    artifact = verdict_markdown(published)
    assert "Best setting by ndcg@10: strong flat" in artifact and html_path.resolve().as_uri() in artifact


def test_verdict_names_a_cheaper_setting_within_the_margin(tmp_path):
    constructed_run(tmp_path, runner_gap=0.004)
    verdict = decide(tmp_path, "ndcg@10")
    assert verdict.as_good_and_cheaper.row["label"] == "close flat"
    words = " ".join(verdict_sentences(verdict))
    assert "As good and cheaper: close flat" in words and "$ per 1,000 queries $0.0200 against $0.1000 (-80%)" in words
    # 0.004 lower on every query is significant: the verdict says so, and names the margin.
    assert "significantly lower than the best" in words and "by less than the 0.010 margin" in words


def test_verdict_says_not_significant_when_the_runner_up_ties(tmp_path):
    constructed_run(tmp_path, runner_gap=0.0)
    words = " ".join(verdict_sentences(decide(tmp_path, "ndcg@10")))
    assert "not significantly different from the runner-up" in words


@needs_chromium
def test_constructed_report_with_hostile_wide_text_does_not_scroll(tmp_path, browser):
    constructed_run(tmp_path)
    long_id = "x" * 400
    failures = pl.DataFrame({
        "provider": ["strong"], "index": ["flat"], "nprobe": [None], "query_id": [long_id],
        "query_text": ["<img src=x onerror=alert(1)> " + "y" * 500], "query_language": ["en"], "category": ["$\\frac{a}{b}$"],
        "split": ["dev"], "measure": ["ndcg@10"], "value": [0.1], "relevant_judged": [1], "first_relevant_rank": [None],
        "exact_first_relevant_rank": [None], "failure_class": ["absent"],
        "top_k": [[{"rank": 1, "doc_id": "d" * 300, "chunk_id": "c", "score": 0.5, "grade": None, "relevant": False}]],
    }, schema_overrides={"nprobe": pl.Int64, "first_relevant_rank": pl.Int64, "exact_first_relevant_rank": pl.Int64})
    failures.write_parquet(tmp_path / "failures.parquet")
    html_path, _ = build_report(tmp_path, "wide")
    facts = read(browser, html_path, "constructed-wide", tmp_path)
    assert facts["scrollWidth"] <= facts["viewport"]
    assert "<img src=x" not in html_path.read_text()


HINDI_CARDS = r"""JSON.stringify([...document.querySelectorAll('.failure')]
  .filter(card => /[\u0900-\u097F]/.test(card.querySelector('.q').textContent))
  .map(card => { const r = card.getBoundingClientRect();
                 return {x: r.x, y: r.y + window.scrollY, width: r.width, height: r.height,
                         text: card.querySelector('.q').textContent}; }))"""


@needs_chromium
def test_hindi_failure_cards_are_drawn_with_the_embedded_devanagari_font(sample_out, browser, tmp_path):
    """The machine has no Devanagari font of its own: without the page's embedded one, Chromium
    draws the Hindi queries as empty boxes. It must name that font as the one the text used."""
    page = browser.open((sample_out / "report.html").as_uri(), width=VIEWPORT)
    page.evaluate("document.fonts.ready.then(() => true)", await_promise=True)
    send = lambda method, params=None: browser.send(method, params or {}, page.session)  # noqa: E731
    send("DOM.enable")
    send("CSS.enable")
    cards = json.loads(page.evaluate(HINDI_CARDS))
    assert cards, "the sample's failure log shows no Hindi query"
    root = send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    queries = send("DOM.querySelectorAll", {"nodeId": root, "selector": ".failure .q"})["nodeIds"]
    hindi = [node for node in queries if any(0x0900 <= ord(c) <= 0x097F for c in
                                             send("DOM.getOuterHTML", {"nodeId": node})["outerHTML"])]
    assert len(hindi) == len(cards)
    for node in hindi:
        fonts = {f["familyName"]: f for f in send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]}
        devanagari = fonts.get("Noto Sans Devanagari")
        assert devanagari is not None and devanagari["isCustomFont"] and devanagari["glyphCount"] > 0, fonts
    keep = os.environ.get("RETBENCH_SCREENSHOTS")
    folder = Path(keep) if keep else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    for i, card in enumerate(cards):
        clip = {key: card[key] for key in ("x", "y", "width", "height")} | {"scale": 1}
        data = send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip})["data"]
        (folder / f"hindi-failure-card-{i}.png").write_bytes(base64.b64decode(data))
    assert (folder / "hindi-failure-card-0.png").stat().st_size > 1000
