"""The built-in index kinds, in the order the sweep builds them (tasks/indexes/__init__.py registers them)."""
from __future__ import annotations

from retbench.tasks.indexes.binary import Binary
from retbench.tasks.indexes.flat import Flat
from retbench.tasks.indexes.hnsw import HNSW
from retbench.tasks.indexes.ivf import IVF
from retbench.tasks.indexes.ivfpq import IVFPQ
from retbench.tasks.indexes.sq import SQ

BUILTIN = (Flat(), IVF(), HNSW(), IVFPQ(), SQ(), Binary())
