"""`filter_sweep:` turns on the filtered-ANN side stage (tasks/stages/filtered_ann.py)."""
from retbench.tasks.config.sections import SpecSection
from retbench.tasks.config.variants import FilterSweepSpec

SECTION = SpecSection("filter_sweep", FilterSweepSpec, "filtered IVF vs filtered exact search at chosen selectivities")
