"""The judging pool as a person grades it: a CSV/TSV sheet for spreadsheets, or one offline HTML
page (inline CSS and script, no network) that grades with the keyboard, keeps its state in the
browser's localStorage, and downloads the grades as TREC qrels.

Documents and queries are untrusted input: the page carries them only as JSON in a
`<script type="application/json">` block (with `<`, `>`, `&`, U+2028 and U+2029 escaped) and its
script shows them with textContent; a Content-Security-Policy runs only the page's own script.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from dataclasses import dataclass

import polars as pl

from retbench.tasks.analysis.pool import ranked_by_text

SHEET_COLUMNS = ("pool_rank", "query_id", "query", "doc_id", "chunk_id", "text", "settings", "best_rank",
                 "reciprocal_rank_sum", "ranked_by", "grade")
# A spreadsheet reads a cell starting with one of these as a formula; free text (a query, a
# document) starting so gets a leading ' (shown as text). Ids are written as they are: `judge
# import` and the qrels read them back.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_FREE_TEXT = ("query", "text", "ranked_by")


@dataclass(frozen=True)
class PoolFacts:
    """What the page and the sheet say about the pool besides its pairs."""

    run: str                 # the run's name (the spec's)
    depth: int
    split: str               # "test", "dev", "train" or "all"
    queries: int             # queries pooled
    max_grade: int           # grades are 0..max_grade
    judged: dict[str, float]  # setting -> judged@depth now, on the pooled queries


def sheet_rows(pairs: pl.DataFrame) -> list[dict]:
    """One dict per pair with SHEET_COLUMNS (grade empty), in pool order."""
    rows = []
    for row in pairs.iter_rows(named=True):
        rows.append({
            "pool_rank": row["pool_rank"], "query_id": row["query_id"], "query": row["query"],
            "doc_id": row["doc_id"], "chunk_id": row["chunk_id"] or "", "text": row["text"],
            "settings": row["settings"], "best_rank": row["best_rank"],
            "reciprocal_rank_sum": f"{row['reciprocal_rank_sum']:.4f}",
            "ranked_by": ranked_by_text(row["ranked_by"]), "grade": "",
        })
    return rows


def sheet_text(pairs: pl.DataFrame, delimiter: str = ",") -> str:
    """The pool as CSV (or TSV with delimiter "\\t"): a header of SHEET_COLUMNS, one quoted-as-
    needed row per pair (a text with a newline or the delimiter stays one cell)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=SHEET_COLUMNS, delimiter=delimiter, lineterminator="\r\n")
    writer.writeheader()
    for row in sheet_rows(pairs):
        writer.writerow({k: ("'" + v if k in _FREE_TEXT and str(v).startswith(_FORMULA_START) else v)
                         for k, v in row.items()})
    return buffer.getvalue()


def page_data(pairs: pl.DataFrame, facts: PoolFacts) -> dict:
    """What the page embeds: the facts, the pairs, and `hash`, a content hash of both that keys
    the page's saved grades (a different pool never reads another's)."""
    body = {
        "run": facts.run, "depth": facts.depth, "split": facts.split, "queries": facts.queries,
        "max_grade": facts.max_grade, "judged": facts.judged,
        "pairs": [{"query_id": r["query_id"], "query": r["query"], "doc_id": r["doc_id"], "chunk_id": r["chunk_id"],
                   "text": r["text"], "start": r["start"], "end": r["end"], "ranked_by": ranked_by_text(r["ranked_by"])}
                  for r in pairs.iter_rows(named=True)],
        # Each document once, however many queries pooled it.
        "documents": dict(pairs.select("doc_id", "document").unique("doc_id", maintain_order=True).iter_rows()),
    }
    canonical = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return {**body, "hash": hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]}


def script_json(value) -> str:
    """JSON that can sit inside <script type="application/json">: no `</script>`, `<!--` or
    character reference can form, and U+2028/2029 cannot end a line."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text


def judging_page(pairs: pl.DataFrame, facts: PoolFacts) -> str:
    """The offline grading page: keys 0..max_grade grade the pair shown (and move to the next),
    arrow keys or j/k move, Backspace clears, d downloads the qrels of the graded pairs."""
    data = page_data(pairs, facts)
    csp = (f"default-src 'none'; script-src {_sha256_source(_SCRIPT)}; style-src {_sha256_source(_STYLE)}; "
           "base-uri 'none'; form-action 'none'")
    return (
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<title>retbench judging pool</title>\n"
        f"<style>{_STYLE}</style>\n</head>\n<body>\n{_BODY}\n"
        f"<script type=\"application/json\" id=\"pool\">{script_json(data)}</script>\n"
        f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )


def _sha256_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


_STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; margin: 0 auto; max-width: 60rem; padding: 1rem 1.5rem; color: #1b1b1b; }
h1 { font-size: 1.3rem; margin: 0 0 .25rem; }
.facts, .help { color: #555; font-size: .9rem; margin: .25rem 0; }
.bar { display: flex; flex-wrap: wrap; gap: .75rem; align-items: center; margin: .75rem 0; }
.bar a { font-weight: 600; }
.label .ids { text-transform: none; letter-spacing: 0; }
details { margin: .5rem 0; }
mark { background: #fff1a8; }
.label { color: #555; font-size: .85rem; text-transform: uppercase; letter-spacing: .04em; margin: 1rem 0 .25rem; }
.query { font-size: 1.15rem; font-weight: 600; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f6f4; border: 1px solid #ddd;
        border-radius: 4px; padding: .75rem 1rem; max-height: 55vh; overflow-y: auto; }
.ids { font-family: ui-monospace, monospace; font-size: .85rem; color: #444; overflow-wrap: anywhere; }
.grades button, .nav button { font: inherit; min-width: 2.6rem; padding: .3rem .6rem; border: 1px solid #888;
        border-radius: 4px; background: #fff; cursor: pointer; }
.grades button.chosen { background: #1f5fbf; border-color: #1f5fbf; color: #fff; }
progress { width: 12rem; }
"""

_BODY = """<h1 id="title">retbench judging pool</h1>
<p class="facts" id="facts"></p>
<p class="facts" id="judged"></p>
<div class="bar"><span id="progress-text"></span><progress id="progress" value="0" max="1"></progress>
<a id="download" href="#" download="judgments.qrels">download qrels</a></div>
<div class="bar nav"><button id="previous" type="button">&larr; previous</button>
<span id="position"></span><button id="next" type="button">next &rarr;</button></div>
<p class="label">query <span class="ids" id="query-id"></span></p>
<p class="query" id="query"></p>
<p class="label">document <span class="ids" id="doc-id"></span></p>
<div class="text" id="text"></div>
<details id="whole"><summary id="whole-summary">the whole document</summary><div class="text" id="document"></div></details>
<p class="ids" id="ranked-by"></p>
<div class="bar grades" id="grades"></div>
<p class="help" id="help"></p>"""

_SCRIPT = """
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("pool").textContent);
  const pairs = data.pairs;
  const storageKey = "retbench-judge:" + data.hash;
  const byId = (id) => document.getElementById(id);
  let state = { position: 0, grades: {} };
  try {
    const saved = JSON.parse(window.localStorage.getItem(storageKey) || "null");
    if (saved && typeof saved === "object") {
      if (Number.isInteger(saved.position) && saved.position >= 0 && saved.position < pairs.length) {
        state.position = saved.position;
      }
      for (const [index, grade] of Object.entries(saved.grades || {})) {
        if (pairs[Number(index)] && Number.isInteger(grade) && grade >= 0 && grade <= data.max_grade) {
          state.grades[index] = grade;
        }
      }
    }
  } catch (error) { /* no storage, or not ours: start afresh */ }
  let downloadUrl = null;

  function save() {
    try { window.localStorage.setItem(storageKey, JSON.stringify(state)); } catch (error) { /* private mode */ }
  }

  function qrelsText() {
    let lines = "";
    pairs.forEach((pair, index) => {
      const grade = state.grades[String(index)];
      if (grade !== undefined) { lines += pair.query_id + " 0 " + pair.doc_id + " " + grade + "\\n"; }
    });
    return lines;
  }

  function graded() { return Object.keys(state.grades).length; }

  function render() {
    const pair = pairs[state.position];
    const index = String(state.position);
    byId("position").textContent = "pair " + (state.position + 1) + " of " + pairs.length;
    byId("query-id").textContent = pair.query_id;
    byId("query").textContent = pair.query;
    byId("doc-id").textContent = pair.doc_id + (pair.chunk_id && pair.chunk_id !== pair.doc_id ? " (chunk " + pair.chunk_id + ")" : "");
    byId("text").textContent = pair.text;
    byId("text").scrollTop = 0;
    showDocument(pair);
    byId("ranked-by").textContent = "ranked by " + pair.ranked_by;
    for (const button of byId("grades").children) {
      button.classList.toggle("chosen", state.grades[index] === Number(button.dataset.grade));
    }
    const done = graded();
    byId("progress-text").textContent = "graded " + done + " of " + pairs.length;
    byId("progress").max = pairs.length;
    byId("progress").value = done;
    const link = byId("download");
    if (downloadUrl !== null) { URL.revokeObjectURL(downloadUrl); }
    downloadUrl = URL.createObjectURL(new Blob([qrelsText()], { type: "text/plain" }));
    link.href = downloadUrl;
    link.textContent = "download qrels (" + done + " graded)";
  }

  function showDocument(pair) {
    // The whole document, the chunk that ranked it marked: three text nodes, never markup.
    const whole = data.documents[pair.doc_id] || "";
    const box = byId("document");
    box.replaceChildren();
    const chunk = pair.start !== null && pair.end !== null && pair.end <= whole.length;
    const mark = document.createElement("mark");
    mark.textContent = chunk ? whole.slice(pair.start, pair.end) : "";
    box.append(document.createTextNode(chunk ? whole.slice(0, pair.start) : whole));
    if (chunk) { box.append(mark, document.createTextNode(whole.slice(pair.end))); }
    byId("whole-summary").textContent = "the whole document (" + whole.length + " characters"
      + (chunk ? ", the chunk marked)" : ")");
  }

  function move(step) {
    state.position = Math.min(pairs.length - 1, Math.max(0, state.position + step));
    save();
    render();
  }

  function grade(value) {
    state.grades[String(state.position)] = value;
    if (state.position < pairs.length - 1) { state.position += 1; }
    save();
    render();
  }

  function clear() {
    delete state.grades[String(state.position)];
    save();
    render();
  }

  byId("title").textContent = "Judging pool: " + data.run;
  document.title = "retbench judging pool: " + data.run;
  byId("facts").textContent = pairs.length + " unjudged pairs from the top " + data.depth + " of every setting, "
    + data.queries + " " + (data.split === "all" ? "" : data.split + " ") + "queries; most settings and highest ranks first. "
    + "Grades 0 (not relevant) to " + data.max_grade + " (highest).";
  byId("judged").textContent = "judged@" + data.depth + " now: " + Object.entries(data.judged)
    .map(([setting, share]) => setting + " " + share.toFixed(2)).join(", ");
  const keys = data.max_grade <= 9 ? "keys 0-" + data.max_grade + " grade and move on" : "click a grade";
  byId("help").textContent = keys + "; \\u2190 \\u2192 (or k j) move; Backspace clears the grade; w shows the whole document; "
    + "d downloads the qrels of the graded pairs (query 0 doc grade). Grades are kept in this browser.";
  byId("download").download = "judgments-" + data.hash + ".qrels";
  for (let value = 0; value <= data.max_grade; value += 1) {
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.grade = String(value);
    button.textContent = String(value);
    button.addEventListener("click", () => grade(value));
    byId("grades").appendChild(button);
  }
  byId("previous").addEventListener("click", () => move(-1));
  byId("next").addEventListener("click", () => move(1));
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    const key = event.key;
    if (/^[0-9]$/.test(key) && Number(key) <= data.max_grade) { grade(Number(key)); }
    else if (key === "ArrowRight" || key === "j") { move(1); }
    else if (key === "ArrowLeft" || key === "k") { move(-1); }
    else if (key === "Backspace" || key === "Delete") { clear(); }
    else if (key === "d") { byId("download").click(); }
    else if (key === "w") { byId("whole").open = !byId("whole").open; }
    else { return; }
    event.preventDefault();
  });
  render();
})();
"""
