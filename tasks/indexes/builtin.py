"""The built-in index kinds, registered in the order the sweep builds them."""
from __future__ import annotations

from tasks.indexes import register
from tasks.indexes.binary import Binary
from tasks.indexes.flat import Flat
from tasks.indexes.hnsw import HNSW
from tasks.indexes.ivf import IVF
from tasks.indexes.ivfpq import IVFPQ
from tasks.indexes.sq import SQ

BUILTIN = tuple(register(kind) for kind in (Flat(), IVF(), HNSW(), IVFPQ(), SQ(), Binary()))
