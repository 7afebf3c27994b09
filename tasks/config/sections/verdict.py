"""`verdict:` tunes the report's "as good, and cheaper" rule (tasks/reporting/verdict.py)."""
from retbench.tasks.config.sections import SpecSection
from retbench.tasks.config.verdict import VerdictSpec

SECTION = SpecSection("verdict", VerdictSpec, "the margin and the smallest saving behind 'as good as the best, and "
                                              "cheaper' (defaults apply when unset)")
