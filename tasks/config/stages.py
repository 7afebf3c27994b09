"""The pipeline's stages in order; `retbench run --stage S` runs up to S. A module of its own
so the command line can list them without loading anything else. `finetune` trains the spec's
`kind: finetuned` providers (a no-op without them): their embed stage needs the trained model."""

STAGES = ("load-dataset", "chunk", "finetune", "embed", "index", "retrieve", "score")
