"""flows/dask_progress.py: the workers' counts of one set's parts summed into one progress line,
never going down, ending at the plan's total, and the stop line's kept counts summed too."""
from retbench.flows.dask_progress import DaskProgress
from retbench.tasks.progress import clear_stop


def counts(loop: str, done: int, total: int, state: str = "advance", before: int = 0, what: str = "embed m documents"):
    return (0.0, {"kind": "counts", "id": loop, "what": what, "done": done, "before": before, "total": total,
                  "unit": "texts", "keeps": True, "state": state})


def test_parts_on_two_workers_sum_into_one_line_that_ends_at_the_plans_total():
    lines = []
    progress = DaskProgress(lines.append, every=0)
    progress.handle((0.0, {"kind": "plan", "what": "embed m documents", "total": 300, "line": "m document texts: 300 to embed in 3 part(s)"}))
    progress.handle(counts("a", 40, 100))
    progress.handle(counts("b", 24, 100))
    progress.handle(counts("a", 100, 100, "finished"))
    progress.handle(counts("c", 8, 100))
    progress.handle(counts("b", 100, 100, "finished"))
    progress.handle(counts("c", 100, 100, "finished"))
    assert lines[0] == "m document texts: 300 to embed in 3 part(s)"
    shown = [line.split(": ")[1].split(" ")[0] for line in lines[1:]]
    # the plan's total from the first line on (not the 100 of the one part reported so far)
    assert shown == ["40/300", "64/300", "124/300", "132/300", "208/300", "300/300"]
    assert progress.settled() and progress.stopped() == []


def test_a_retried_part_never_makes_the_count_go_down_or_past_the_total():
    lines = []
    progress = DaskProgress(lines.append, every=0)
    progress.handle((0.0, {"kind": "plan", "what": "embed m documents", "total": 100, "line": "plan"}))
    progress.handle(counts("a", 80, 100))
    progress.handle(counts("a2", 80, 100, before=80))  # the same part again on another worker: 80 kept
    progress.handle(counts("a2", 96, 100, before=80))
    done = [int(line.split(": ")[1].split("/")[0]) for line in lines[1:]]
    assert done == sorted(done) and max(done) <= 100


def test_a_stop_reports_every_parts_kept_texts_and_the_set_with_most_left():
    clear_stop()
    progress = DaskProgress(lambda line: None, every=0)
    progress.handle((0.0, {"kind": "plan", "what": "embed m documents", "total": 600, "line": "plan"}))
    progress.handle(counts("a", 64, 75, "stopped"))
    progress.handle(counts("b", 40, 75))
    assert not progress.settled()
    progress.handle(counts("b", 48, 75, "stopped"))
    progress.handle(counts("q", 3, 3, "stopped", what="embed m queries"))
    assert progress.settled()
    stopped = {stop.what: str(stop) for stop in progress.stopped()}
    assert stopped["embed m documents"] == "interrupted during embed m documents: 112 of 600 texts kept; rerun to continue"
    assert stopped["embed m queries"] == "interrupted during embed m queries: 3 of 3 texts kept; rerun to continue"
    clear_stop()


def test_a_resumed_set_counts_the_journals_of_parts_not_started_yet_as_kept():
    """A stopped run kept 40 texts in the journals of two parts; the rerun's first part to start
    finds 30 of them in its journal and embeds 16 more: 56 kept, not 46 (the other part's 10
    are kept too, though it has not started)."""
    lines = []
    progress = DaskProgress(lines.append, every=0)
    progress.handle((0.0, {"kind": "plan", "what": "embed m documents", "total": 600, "kept": 40, "line": "plan"}))
    progress.handle(counts("a", 46, 75, before=30))
    # As the plain runner says it: what is left, with what was kept before apart.
    assert lines[-1].startswith("embed m documents: 16/560 texts (3%; 40 more already kept)")
