"""Measure names a spec may ask for: the grammar `name[@k]`, each name's cutoff rule, and the
measures a spec scores by default. The kernels behind the names are in tasks/analysis/metrics.py;
the names live here so a spec is checked without numpy and without the analysis layer."""
from __future__ import annotations

import difflib
import re

# Each name's cutoff: "required" (recall@10), "optional" (ndcg or ndcg@10) or "none".
# The order is the one an unknown name's error lists them in.
CUTOFF_RULES: dict[str, str] = {
    "ndcg": "optional",
    "ndcg_exp": "required",
    "recall": "required",
    "recall_cap": "required",
    "p": "required",
    "mrr": "optional",
    "map": "optional",
    "hit_rate": "required",
    "judged": "optional",
    "ndcg_condensed": "optional",
    "bpref": "none",
}

_NAME = re.compile(r"^\s*([a-z_]+)\s*(?:@\s*(\d+))?\s*$")


def parse_measure_name(name: str) -> tuple[str, int | None]:
    """``"nDCG@10"`` -> ("ndcg", 10). Case-insensitive; canonical names are lower case."""
    m = _NAME.match(name.lower())
    if not m or m.group(1) not in CUTOFF_RULES:
        known = ", ".join(f"{n}@k" if rule == "required" else f"{n}[@k]" if rule == "optional" else n
                          for n, rule in CUTOFF_RULES.items())
        # difflib here rather than spec_errors.did_you_mean: the metrics import this module and
        # nothing else of retbench (tests/unit/test_architecture.py).
        close = difflib.get_close_matches(m.group(1), list(CUTOFF_RULES), n=1) if m else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown measure {name!r}{hint}; known measures: {known}")
    k = None if m.group(2) is None else int(m.group(2))
    check_cutoff(m.group(1), CUTOFF_RULES[m.group(1)], k)
    return m.group(1), k


def check_cutoff(name: str, rule: str, k: int | None) -> None:
    """Refuse a cutoff the measure `name` (whose cutoff is `rule`) cannot take."""
    if k is None and rule == "required":
        raise ValueError(f"measure {name!r} needs a cutoff, e.g. {name}@10")
    if k is not None and rule == "none":
        raise ValueError(f"measure {name!r} takes no cutoff (got {name}@{k})")
    if k is not None and k < 1:
        raise ValueError(f"cutoff must be a positive integer (got {name}@{k})")


def canonical_measure(name: str) -> str:
    """The measure's canonical name (``"nDCG@10"`` -> ``"ndcg@10"``), or a ValueError naming what is known."""
    base, k = parse_measure_name(name)
    return base if k is None else f"{base}@{k}"


def default_primary_measure(ks: list[int]) -> str:
    """nDCG at the cutoff of `ks` nearest 10; of two as near (5 and 15) the larger, which looks
    deeper: [5] -> ndcg@5, [5, 20] -> ndcg@5, [5, 15] -> ndcg@15, [5, 10, 20] -> ndcg@10."""
    return f"ndcg@{min(ks, key=lambda k: (abs(k - 10), -k))}"


def default_measures(ks: list[int]) -> list[str]:
    """Recall@k, MRR and graded nDCG@k (linear gain, as trec_eval), plus the
    exponential-gain nDCG (2^rel - 1) under its own name; then, at the primary measure's
    cutoff, how much of the top was judged (judged@k), nDCG' on the condensed list, and bpref:
    what the verdict needs to say when unjudged docs could change its answer."""
    measures = [f"recall@{k}" for k in ks] + ["mrr"] + [f"ndcg@{k}" for k in ks]
    cut = default_primary_measure(ks).split("@")[1]
    return measures + [f"ndcg_exp@{k}" for k in ks] + [f"judged@{cut}", f"ndcg_condensed@{cut}", "bpref"]
