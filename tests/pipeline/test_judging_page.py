"""The judging page of `retbench judge export` in headless Chromium: graded with key presses, its
download link saves the qrels of the graded pairs (a real download, to a folder), a reload keeps
the grades, and a document or query holding markup shows as text, running nothing."""
from __future__ import annotations

import json
import time

import polars as pl
import pytest

from retbench.flows.cli import main
from retbench.support.headless import CHROMIUM, Chromium
from retbench.tasks.datasets.model import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, Dataset
from retbench.tasks.stages.dataset import save_dataset

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)")

HOSTILE = "Steps </script><script>document.title='PWNED'</script> and <b>bold</b> & \u2028 more"
QUERY = "<img src=x onerror=\"document.title='PWNED'\"> rotate keys"
HINDI = "कुंजी बदलने के लिए सेटिंग्स में जाएँ और नई कुंजी बनाएँ।"  # document c: Devanagari, combining marks
# q1's pool: a (both settings), b, c, d; a is first and carries the hostile text.
RANKINGS = {("m", "q1"): ["a", "b", "j"], ("n", "q1"): ["a", "c", "d"]}


def _output_folder(base):
    corpus = pl.DataFrame([("a", "Keys", HOSTILE, "en"), ("c", "कुंजी", HINDI, "hi"),
                           *[(d, f"Title {d}", f"Text of {d}.", "en") for d in "bdj"]],
                          schema=CORPUS_SCHEMA, orient="row")
    queries = pl.DataFrame([("q1", QUERY, "en", "keys", "test")], schema=QUERIES_SCHEMA, orient="row")
    qrels = pl.DataFrame([("q1", "j", 2)], schema=QRELS_SCHEMA, orient="row")  # the dataset grades 0-2
    dataset_dir = save_dataset(Dataset("hand", corpus, queries, qrels), base / "store" / "datasets" / "x")
    document = "Keys\n\n" + HOSTILE
    pl.DataFrame({"chunk_id": ["a#0"], "doc_id": ["a"], "start": [6], "end": [len(document)], "text": [HOSTILE]}
                 ).write_parquet(base / "store" / "chunks.parquet")
    out = base / "out"
    out.mkdir()
    pl.DataFrame([(q, p, "flat", None, doc, f"{doc}#0", 1.0 - i / 10) for (p, q), docs in RANKINGS.items()
                  for i, doc in enumerate(docs)],
                 schema={"query_id": pl.String, "provider": pl.String, "index": pl.String, "nprobe": pl.Int64,
                         "doc_id": pl.String, "chunk_id": pl.String, "score": pl.Float64}, orient="row",
                 ).write_parquet(out / "runs.parquet")
    (out / "manifest.json").write_text(json.dumps({"run": {"spec_name": "hand"}, "dataset": {"path": str(dataset_dir)},
                                                   "chunks": {"path": str(base / "store" / "chunks.parquet")}}))
    return out


def _press(browser, page, key: str) -> None:
    printable = len(key) == 1
    codes = {"ArrowRight": 39, "ArrowLeft": 37, "Backspace": 8}
    down = {"type": "keyDown" if printable else "rawKeyDown", "key": key,
            "windowsVirtualKeyCode": ord(key.upper()) if printable else codes[key]}
    if printable:
        down["text"] = key
    browser.send("Input.dispatchKeyEvent", down, page.session)
    browser.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": key,
                                            "windowsVirtualKeyCode": down["windowsVirtualKeyCode"]}, page.session)


def _shown(page) -> dict:
    return json.loads(page.evaluate("""JSON.stringify({
      progress: document.getElementById('progress-text').textContent,
      position: document.getElementById('position').textContent,
      query: document.getElementById('query').textContent,
      text: document.getElementById('text').textContent,
      textElements: document.getElementById('text').children.length,
      queryElements: document.getElementById('query').children.length,
      marked: (document.querySelector('#document mark') || {}).textContent,
      chosen: [...document.querySelectorAll('#grades button.chosen')].map(b => b.textContent),
      grades: [...document.querySelectorAll('#grades button')].map(b => b.textContent),
      scripts: document.querySelectorAll('script').length,
      images: document.images.length,
      title: document.title,
    })"""))


def test_grade_with_keys_download_qrels_and_reload(tmp_path):
    out = _output_folder(tmp_path)
    page_path = tmp_path / "pool.html"
    assert main(["judge", "export", str(out), "--out", str(page_path)]) == 0
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with Chromium() as browser:
        browser.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        page = browser.open(page_path.as_uri())
        shown = _shown(page)
        # Markup in the data is text: no element made from it, no script run, the title untouched.
        assert shown["text"] == HOSTILE and shown["textElements"] == 0
        assert shown["query"] == QUERY and shown["queryElements"] == 0
        assert shown["marked"] == HOSTILE
        assert (shown["scripts"], shown["images"], shown["title"]) == (2, 0, "retbench judging pool: hand")
        assert shown["grades"] == ["0", "1", "2"]  # the qrels' scale, not 0-3
        assert (shown["progress"], shown["position"]) == ("graded 0 of 4", "pair 1 of 4")

        for key in ("2", "ArrowRight", "3", "0", "1"):  # 3 is beyond the scale: ignored
            _press(browser, page, key)
        assert (_shown(page)["progress"], _shown(page)["position"]) == ("graded 3 of 4", "pair 4 of 4")
        _press(browser, page, "ArrowLeft")
        assert _shown(page)["chosen"] == ["0"]  # pair 3 (c) was graded 0
        assert HINDI in _shown(page)["text"]  # the Devanagari document, whole (its combining marks kept)

        _press(browser, page, "d")
        expected = "q1 0 a 2\nq1 0 c 0\nq1 0 d 1\n"  # pool order: a, b, c, d; b was skipped
        assert _downloaded(downloads) == expected

        # Chromium's renderer hands localStorage writes to the browser process in batches, a moment
        # later (longer on a loaded machine): a reload in that moment reads the store as it was. A
        # person reloads seconds after grading; here the page is reloaded until the grades show, for
        # at most 30 s.
        deadline = time.monotonic() + 30
        while True:
            page.evaluate("window.beforeReload = true; location.reload()")
            while time.monotonic() < deadline:
                if page.evaluate("window.beforeReload !== true && document.readyState === 'complete' "
                                 "&& document.getElementById('progress-text').textContent !== ''"):
                    break
                time.sleep(0.1)
            again = _shown(page)
            if again["progress"] != "graded 0 of 4" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert (again["progress"], again["position"], again["chosen"]) == ("graded 3 of 4", "pair 3 of 4", ["0"])


def _downloaded(folder, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [p for p in folder.iterdir() if p.suffix == ".qrels"]
        if done:
            assert len(done) == 1 and done[0].name.startswith("judgments-")
            return done[0].read_text(encoding="utf-8")
        time.sleep(0.1)
    raise AssertionError(f"no qrels downloaded into {folder} (found {sorted(p.name for p in folder.iterdir())})")
