"""The report's plots (matplotlib, Agg): each function returns a PNG as base64 text, or None when
the data to draw it is missing. Labels are placed in legends or on axes, never on top of points."""
from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from importlib.metadata import version
from pathlib import Path

import polars as pl

from retbench.tasks.store.build import build_once
from retbench.tasks.store.files import file_sha256, stable_hash

DPI = 100
WIDTH = 10.0  # inches: 1000 px, inside the page's 1100 px column
BEST, CHEAP, OTHER = "#1b7837", "#2166ac", "#9e9e9e"


def safe(text: str, limit: int = 40) -> str:
    """Data text as a matplotlib label: '$' would start mathtext (and a parse error), long text is cut."""
    text = " ".join(str(text).split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("$", r"\$")


# Where drawn figures are kept, keyed by what they show (None: draw every time). A cached rerun
# then redraws only what changed, and usually imports no matplotlib at all (seconds).
_CACHE_DIR: ContextVar[Path | None] = ContextVar("figure_cache", default=None)


@contextmanager
def cached_in(store: str | Path | None):
    """Within the block, figures are read from / kept in the store's `figures/` folder."""
    token = _CACHE_DIR.set(Path(store) if store is not None else None)
    try:
        yield
    finally:
        _CACHE_DIR.reset(token)


def _digest(value) -> str:
    if isinstance(value, pl.DataFrame):
        # polars' own IPC layout is not a function of the values: its string views point into
        # data buffers laid out as the frame was built, so the report's settings frame hashed
        # differently on every rerun and its figures were drawn again each time. One chunk in
        # Arrow's plain layout (offsets and one data buffer per string column) is.
        buffer = io.BytesIO()
        value.rechunk().write_ipc(buffer, compat_level=pl.CompatLevel.oldest())
        return hashlib.sha256(buffer.getvalue()).hexdigest()
    return json.dumps(value, sort_keys=True, default=str)


def _memoised(draw):
    """A figure function whose result is kept in the store (the one build routine: checksummed,
    verified on reuse), keyed by its arguments, this module's code and matplotlib's version."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        store = _CACHE_DIR.get()
        if store is None:
            return draw(*args, **kwargs)
        key = stable_hash("figure-v1", file_sha256(__file__), version("matplotlib"), draw.__name__,
                          [_digest(a) for a in args], {k: _digest(v) for k, v in sorted(kwargs.items())})
        drawn = []

        def build(tmp: str) -> None:
            drawn.append(draw(*args, **kwargs))
            Path(tmp).write_text(json.dumps({"value": drawn[0], "tuple": isinstance(drawn[0], tuple)}))

        path = store / "figures" / f"{key[:40]}.json"
        build_once(store, path, build, parse=lambda p: json.loads(p.read_text()), work=False)
        if drawn:
            return drawn[0]
        kept = json.loads(path.read_text())
        return tuple(kept["value"]) if kept["tuple"] else kept["value"]
    return wrapper


# Latin first, then Devanagari for what DejaVu lacks: matplotlib (>= 3.6) falls back glyph by glyph
# along an explicit family list (not along a generic "sans-serif"), so Hindi labels are not boxes.
FONT_FAMILIES = ("DejaVu Sans", "Noto Sans Devanagari")


def load_matplotlib():
    """matplotlib.pyplot on the Agg backend (imported on first call), with the Devanagari font
    shipped as a dependency (fontpkg-noto-sans-devanagari) registered and in the family list."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _register_devanagari()
    return plt


@functools.cache
def _register_devanagari() -> None:
    import matplotlib
    from matplotlib import font_manager

    import fontpkg_noto_sans_devanagari as noto

    for path in sorted((noto.ROOT / "files").glob("*.[ot]tf")):
        font_manager.fontManager.addfont(str(path))
    matplotlib.rcParams["font.family"] = list(FONT_FAMILIES)


# Devanagari and the code points its shaping needs (ZWNJ, ZWJ, the dotted circle of a lone sign).
DEVANAGARI_RANGES = ((0x0900, 0x097F), (0x1CD0, 0x1CFF), (0xA8E0, 0xA8FF))
_SHAPING = "\u200c\u200d\u25cc"


_DEVANAGARI = re.compile("[" + "".join(f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in DEVANAGARI_RANGES) + "]")


def devanagari_letters(text: str) -> str:
    """The distinct Devanagari characters of `text`, sorted ("" when it has none). A regular
    expression, not a loop in Python: the page's text holds its figures as megabytes of base64."""
    return "".join(sorted(set(_DEVANAGARI.findall(text))))


@_memoised
def devanagari_font(letters: str) -> str:
    """The shipped Devanagari font cut to `letters` (with the conjuncts and signs that shape them)
    and fixed at its regular weight, as base64 TrueType for a page to embed: tens of KB where the
    variable font file is 640 KB. Kept in the store by its letters, so a rerun cuts nothing."""
    return _cut_devanagari_font(letters)


@functools.lru_cache(maxsize=16)
def _cut_devanagari_font(letters: str) -> str:
    """The cut itself (seconds of fontTools work), kept for the process and in the user's cache
    folder (as matplotlib keeps its font list there): reports of one collection in new stores,
    nightly runs, test sessions cut their letters once. Both are derived data, keyed by the font
    file, fontTools' version and the letters; a cache that cannot be written is skipped."""
    import fontpkg_noto_sans_devanagari as noto
    import fontTools

    source = next((noto.ROOT / "files").glob("*.ttf"))
    key = hashlib.sha256(f"{source.name}|{source.stat().st_size}|{fontTools.version}|{letters}".encode()).hexdigest()
    cached = _FONT_CACHE / f"{key[:40]}.b64"
    try:
        return cached.read_text(encoding="ascii")
    except OSError:
        pass
    cut = _cut(source, letters)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(cut, encoding="ascii")
        os.replace(partial, cached)
    except OSError:
        pass
    return cut


_FONT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "retbench" / "fonts"


def _cut(source: Path, letters: str) -> str:
    from fontTools import subset
    from fontTools.ttLib import TTFont
    from fontTools.varLib import instancer

    font = TTFont(str(source))
    options = subset.Options()
    options.layout_features = ["*"]  # every shaping feature: conjuncts, reph, matra positions
    options.notdef_outline = True
    cutter = subset.Subsetter(options)
    cutter.populate(text=letters + _SHAPING)
    cutter.subset(font)
    if "fvar" in font:
        font = instancer.instantiateVariableFont(font, {"wght": 400, "wdth": 100})
    buffer = io.BytesIO()
    font.save(buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _png(figure) -> str:
    plt = load_matplotlib()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@_memoised
def sweep_plot(sweep: pl.DataFrame, recommendations: dict) -> str | None:
    """Neighbour recall@k vs batched QPS per provider, one line per built index, recommended ringed."""
    recall = next((c for c in sweep.columns if c.startswith("neighbour_recall@")), None)
    if recall is None or "qps_batch" not in sweep.columns or sweep.is_empty():
        return None
    plt = load_matplotlib()
    providers = sweep["provider"].unique(maintain_order=True).to_list()
    columns = min(3, len(providers))
    rows_n = -(-len(providers) // columns)
    figure, axes = plt.subplots(rows_n, columns, figsize=(WIDTH, 3.3 * rows_n + 0.8), squeeze=False, sharey=True)
    kinds: dict[str, int] = {}
    for i, provider in enumerate(providers):
        axis = axes[i // columns][i % columns]
        table = sweep.filter(pl.col("provider") == provider)
        for (kind, build), group in table.group_by(["index_kind", "build_params"], maintain_order=True):
            name = kind if build in (None, "{}") else f"{kind} " + ", ".join(
                f"{a}={b}" for a, b in json.loads(build).items() if a not in ("seed", "train_size"))
            colour = kinds.setdefault(name, len(kinds))
            group = group.sort("qps_batch")
            axis.plot(group[recall].to_list(), group["qps_batch"].to_list(), marker="*" if kind == "flat" else "o",
                      markersize=9 if kind == "flat" else 4, color=f"C{colour % 10}", label=safe(name, 60))
        pick = recommendations.get(provider)
        if pick:
            chosen = table.filter((pl.col("index_kind") == pick["index_kind"])
                                  & (pl.col("build_params").map_elements(lambda s: json.loads(s or "{}") == pick["build_params"], return_dtype=pl.Boolean))
                                  & (pl.col("query_params").map_elements(lambda s: json.loads(s or "{}") == pick["query_params"], return_dtype=pl.Boolean)))
            if chosen.height:
                axis.scatter(chosen[recall].to_list(), chosen["qps_batch"].to_list(), s=220, facecolors="none",
                             edgecolors="red", linewidths=2, zorder=5, label="recommended")
        axis.set_yscale("log")
        axis.set_title(safe(provider), fontsize=10)
        axis.set_xlabel(f"{recall} (vs exact search)", fontsize=9)
        axis.grid(True, which="both", alpha=0.3)
    for j in range(len(providers), rows_n * columns):
        axes[j // columns][j % columns].set_visible(False)
    axes[0][0].set_ylabel("queries / second (batched)")
    handles = {}
    for axis in axes.flat:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    figure.tight_layout()
    figure.legend(handles.values(), handles.keys(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
                  ncol=min(4, len(handles)), fontsize=8)
    return _png(figure)
