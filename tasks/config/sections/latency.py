"""`latency:` turns on the latency profile side stage (tasks/stages/latency.py)."""
from retbench.tasks.config.measurement import LatencySpec
from retbench.tasks.config.sections import SpecSection

SECTION = SpecSection("latency", LatencySpec, "latency profile by batch size (off unless set: it costs time and, "
                                              "on paid APIs, money)")
