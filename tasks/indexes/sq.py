"""Scalar quantisation (faiss.IndexScalarQuantizer): each component in 2 bytes (fp16, nothing to
train) or 1 byte (8bit, per-component ranges learnt from a seeded sample); exhaustive search."""
from __future__ import annotations

from retbench.tasks.indexes.base import IndexKind, Parameter

QTYPES = ("fp16", "8bit")


class SQ(IndexKind):
    name = "sq"
    build_parameters = (Parameter("qtype", type=str, choices=QTYPES, required=True), Parameter("train_size", "train"),
                        Parameter("seed", default=0, minimum=None))

    def validate(self, params):
        if params["qtype"] not in QTYPES:
            raise ValueError(f"sq index: qtype must be one of {', '.join(QTYPES)} (got {params['qtype']!r})")
        if params["qtype"] == "8bit" and not params["train_size"]:
            raise ValueError("sq index: qtype 8bit is trained (per-component ranges): give train_size")
        super().validate(params)

    def build_params(self, params):
        if params["qtype"] == "fp16":  # nothing to train: no sample names it
            return {"qtype": "fp16"}
        return super().build_params(params)

    def plan(self, entry, n_vectors):
        """An `indexes.sq` entry: 8bit learns its ranges from all vectors, up to 100,000, unless told."""
        params, queries, notes = super().plan(entry, n_vectors)
        if params["qtype"] == "8bit":
            params = {**params, "train_size": min(n_vectors, params.get("train_size") or 100_000)}
        return params, queries, notes

    def factory(self, dim, params):
        import faiss

        qtype = {"fp16": faiss.ScalarQuantizer.QT_fp16, "8bit": faiss.ScalarQuantizer.QT_8bit}[params["qtype"]]
        return faiss.IndexScalarQuantizer(dim, qtype, faiss.METRIC_INNER_PRODUCT)

    def training_rows(self, params):
        # SQ8 learns each component's range from the sample; a later vector outside it is clipped.
        return None if params["qtype"] == "fp16" else params["train_size"]

    def bytes_per_vector(self, dim, params):
        return (2.0 if params["qtype"] == "fp16" else 1.0) * dim

    def sweep_grid(self, section, n_vectors, dim):
        grid = []
        for qtype in section.qtype:
            if qtype == "fp16":
                grid.append(({"qtype": "fp16"}, [{}]))
            else:
                train = min(n_vectors, section.train_size or 100_000)
                grid.append(({"qtype": qtype, "train_size": train, "seed": section.seed}, [{}]))
        return grid
