"""Stages as declared units: what a stage is called, what it runs, which tables it writes and
where the report shows them. `tasks/stage_list.py` lists them top-down; `run_pipeline` runs the
main chain and, at each side stage's phase, the side stages the spec turns on."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

# The main stages a side stage can follow: it is submitted once that stage's outputs exist.
PHASES = ("embed", "retrieve", "score")


@dataclass(frozen=True)
class MainStage:
    """A stage of the main chain (load-dataset -> ... -> report), wired by hand in
    tasks/pipeline.py: `calls` are the stage calls it submits; `shown_in` names the report's
    sections (tasks/reporting/html.py SECTIONS) that show its tables."""

    name: str
    calls: tuple[Callable, ...]
    tables: tuple[str, ...] = ()
    shown_in: tuple[str, ...] = ()


@dataclass(frozen=True)
class SideStage:
    """A stage off the main chain, run when the spec turns it on.

    after:   the main stage whose outputs it needs ("embed", "retrieve" or "score"); `call` is
             submitted right after that stage's calls.
    call:    Produced -> list of futures: submits its task runs through `produced.runner`.
    write:   Produced -> {table name: path}: its tables, once the score stage has run (or the
             main chain stopped); its call's results are `produced.results_of(name)`.
    tables:  the table names `write` may return.
    section: the spec key that turns it on (tasks/config/sections/); None: always on.
    switch:  spec -> bool, for a stage turned on otherwise (e.g. statistics.buried_answers).
    runs_with: the lowest `--stage` that includes it (default: `after`).
    report:  (name of the report section it follows, builder: ReportInputs -> Section | None)
             for a section of its own; `shown_in`: the report's own sections that show its tables.
    """

    name: str
    after: str
    call: Callable[[Produced], list] | None = None
    write: Callable[[Produced], dict[str, str]] | None = None
    tables: tuple[str, ...] = ()
    section: str | None = None
    switch: Callable[[Any], bool] | None = None
    runs_with: str | None = None
    report: tuple[str, Callable] | None = None
    shown_in: tuple[str, ...] = ()

    def __post_init__(self):
        if self.after not in PHASES:
            raise ValueError(f"side stage {self.name!r}: after={self.after!r} (expected one of {', '.join(PHASES)})")

    def written(self, paths: dict[str, str]) -> dict[str, str]:
        """`write`'s tables, refused when it names one this stage does not declare (two stages
        writing one table name would overwrite each other's file)."""
        undeclared = sorted(set(paths) - set(self.tables))
        if undeclared:
            raise ValueError(f"side stage {self.name!r} wrote table(s) {undeclared} it does not declare "
                             f"(expected some of: {', '.join(self.tables) or 'none'})")
        return paths

    def on(self, spec, selection) -> bool:
        """Whether this run runs it: the selection reaches it and the spec turns it on."""
        if not selection.reaches(self.runs_with or self.after):
            return False
        if self.section is not None and getattr(spec, self.section, None) is None:
            return False
        return self.switch is None or bool(self.switch(spec))


@dataclass
class Produced:
    """What the main chain has produced so far, filled in as it goes; a side stage's call and
    write read it. Values named `*_sets`, `indexes`, `retrieved` are futures (`.result()`)."""

    spec: Any
    selection: Any
    runner: Any
    make_provider: Callable
    dataset: Any = None
    chunks: Any = None  # the baseline chunking's ChunksRef
    chunk_refs: dict = field(default_factory=dict)  # chunking name -> ChunksRef
    baseline_chunking: str = ""
    filters: Any = None
    active: list = field(default_factory=list)  # ProviderSpecs embedded by this run (fine-tuned ones trained)
    settings: list = field(default_factory=list)  # the active providers' settings (tasks/stages/variants.py)
    doc_sets: dict = field(default_factory=dict)  # (provider, chunking) -> future of an EmbeddingSet
    query_sets: dict = field(default_factory=dict)  # (provider, query variant) -> future of an EmbeddingSet
    embedded: dict = field(default_factory=dict)  # provider -> (documents, queries) futures of the baseline
    plans: dict = field(default_factory=dict)  # chunking name -> index plan
    indexes: dict = field(default_factory=dict)  # (provider, chunking) -> futures of BuiltIndex
    retrieved: list = field(default_factory=list)  # futures of lists of RunResult
    tuned: dict = field(default_factory=dict)  # fine-tuned provider -> trained model record
    runs: list = field(default_factory=list)  # RunResults of every setting
    system_runs: list = field(default_factory=list)
    embeddings: dict = field(default_factory=dict)  # provider -> (documents, queries) EmbeddingSets of the baseline
    built: dict = field(default_factory=dict)  # provider -> BuiltIndexes of the baseline
    tables: dict = field(default_factory=dict)  # table name -> path, written so far
    submitted: dict = field(default_factory=dict)  # side stage name -> futures of its call
    _results: dict = field(default_factory=dict)

    def results_of(self, name: str) -> list:
        """The results of side stage `name`'s call (empty when it did not run), waited for once."""
        if name not in self._results:
            self._results[name] = [f.result() for f in self.submitted.get(name, [])]
        return self._results[name]
