"""The pipeline's stages in order; `retbench run --stage S` runs up to S. A module of its own
so the command line can list them without loading anything else."""

STAGES = ("load-dataset", "chunk", "embed", "index", "retrieve", "score")
