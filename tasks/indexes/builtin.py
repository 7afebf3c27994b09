"""The built-in index kinds, in the order the sweep builds them (tasks/indexes/__init__.py registers them)."""
from __future__ import annotations

from tasks.indexes.binary import Binary
from tasks.indexes.flat import Flat
from tasks.indexes.hnsw import HNSW
from tasks.indexes.ivf import IVF
from tasks.indexes.ivfpq import IVFPQ
from tasks.indexes.sq import SQ

BUILTIN = (Flat(), IVF(), HNSW(), IVFPQ(), SQ(), Binary())
