"""Hindi in the report: figures draw Devanagari with the font shipped as a dependency (matplotlib
reports no missing glyph), and a page with Hindi embeds that font cut to its letters."""
import base64
import io
import warnings

from retbench.tasks.reporting import figures
from retbench.tasks.reporting.html import CSP, Section, render_html

HINDI = "पासवर्ड भूल गया, अब क्या करूँ"


def _missing_glyphs(families: list[str] | None = None) -> list[str]:
    """matplotlib's "Glyph ... missing from font(s)" warnings while drawing Hindi labels."""
    plt = figures.load_matplotlib()
    import matplotlib

    with matplotlib.rc_context({"font.family": families} if families else {}):
        figure, axis = plt.subplots(figsize=(4, 2))
        axis.barh([0, 1], [0.4, 0.7])
        axis.set_yticks([0, 1], [figures.safe(HINDI), "API key"])
        axis.set_title("रिफंड नीति · refund policy")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            figure.savefig(io.BytesIO(), format="png")
        plt.close(figure)
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_a_figure_with_hindi_labels_has_every_glyph():
    assert _missing_glyphs() == []


def test_without_the_devanagari_fallback_matplotlib_does_report_missing_glyphs():
    # The check above can fail: DejaVu Sans alone has no Devanagari.
    assert _missing_glyphs(["DejaVu Sans"])


def test_the_embedded_font_is_cut_to_the_pages_letters_and_covers_them():
    from fontTools.ttLib import TTFont

    letters = figures.devanagari_letters("refund " + HINDI)
    assert letters == "".join(sorted(set(HINDI) - set(" ,")))
    data = base64.b64decode(figures.devanagari_font(letters))
    covered = TTFont(io.BytesIO(data)).getBestCmap()
    assert all(ord(c) in covered for c in letters)
    assert ord("ज") not in covered  # a letter the page does not use is cut
    assert len(data) < 80_000  # the shipped variable font is 640 KB


def test_a_page_with_hindi_embeds_the_font_and_one_without_does_not():
    section = Section("Where it fails", "failures", [("p", HINDI)])
    page = render_html("r", "", [section])
    assert "font-src data:" in CSP and '@font-face{font-family:"Noto Sans Devanagari"' in page
    assert "unicode-range:U+0900-097F" in page and '"Nirmala UI",Mangal' in page
    english = render_html("r", "", [Section("Where it fails", "failures", [("p", "password reset")])])
    assert "@font-face" not in english and '"Noto Sans Devanagari"' in english  # the stack names it still
