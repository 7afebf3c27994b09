"""`sweep:` turns on the ANN sweep side stage (tasks/stages/sweep.py)."""
from retbench.tasks.config.sections import SpecSection
from retbench.tasks.config.sweep import SweepSpec

SECTION = SpecSection("sweep", SweepSpec, "ANN sweep grid (IVF, HNSW, IVF-PQ) against exact search")
