"""Fine-tune a local sentence-transformers model on hard negatives, once per inputs: the trained
folder is content-addressed (base fingerprint + triples + hyperparameters).

Triples come from tasks/analysis/hard_negatives.py (the train split, else dev; never test); this
stage checks again that no training query is a test-split query (by id, and by text), because a model tuned
on its own test queries makes every later number on them meaningless. Training uses
sentence-transformers' trainer with MultipleNegativesRankingLoss (the batch's other documents
and the mined hard negative are the negatives), on CPU, seeded.
"""
from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import polars as pl

from retbench.tasks.analysis.hard_negatives import (
    HELD_OUT_SPLIT, TRIPLET_KEYS, HeldOutSplitError, mining_split, normalised_query_text,
)
from retbench.tasks.progress import Progress
from retbench.tasks.providers.finetuned import TRAINING_RECORD, FinetunedOptions, FinetunedProvider
from retbench.tasks.providers.sentence_transformers import SentenceTransformersProvider
from retbench.tasks.datasets.errors import DatasetError
from retbench.tasks.providers.fingerprint import full_fingerprint
from retbench.tasks.stages.embed import fingerprint_hash
from retbench.tasks.store.build import StageResult, build_folder_once
from retbench.tasks.store.files import stable_hash, write_json, write_parquet

WEIGHTS_FILE = "model/model.safetensors"
LOG_FILE = "training_log.parquet"
# Checked on reuse (checksums); training.json is last: the folder's metadata.
FOLDER_FILES = (WEIGHTS_FILE, LOG_FILE, TRAINING_RECORD)


class FinetuneInputError(DatasetError):
    """The triples cannot train a model (too few, or not from the mining split): a problem of the
    data the spec points at, reported like any other (one `retbench: ...` line)."""


@dataclass(frozen=True, kw_only=True)
class FinetunedModel(StageResult):
    """A trained model folder in the store: `path` is the folder (model/, training_log.parquet, training.json)."""

    base: str  # the spec's provider it was trained from
    source_split: str | None = None  # the split its triples were mined from (None: a folder trained before it was recorded)
    triples: int
    triples_sha256: str
    hyperparameters: dict
    train_seconds: float  # from the record: also when reused
    train_cpu_seconds: float | None = None  # user + system CPU of the training: comparable across machine loads
    peak_rss_mb: float  # of the process that trained it
    final_loss: float | None
    steps: int
    log: list[dict] = field(default_factory=list)  # step, epoch, loss, seconds

    def provider(self, options: FinetunedOptions | dict) -> FinetunedProvider:
        """The `finetuned` provider serving this folder."""
        values = options.model_dump() if isinstance(options, FinetunedOptions) else dict(options)
        return FinetunedProvider(**{**values, "model": self.path})

    def table(self) -> pl.DataFrame:
        """One row: what a training table shows."""
        return pl.DataFrame([{
            "base": self.base, "key": self.key[:16], "source_split": self.source_split, "triples": self.triples,
            **self.hyperparameters,
            "steps": self.steps, "final_loss": self.final_loss, "train_seconds": self.train_seconds,
            "train_cpu_seconds": self.train_cpu_seconds,
            "peak_rss_mb": self.peak_rss_mb, "trained_now": self.computed,
        }])


def check_training_queries(pairs: pl.DataFrame, queries: pl.DataFrame, split: str | None = None) -> None:
    """Every training query must be a query of the mining split (`split`, else mining_split's
    choice: train, else dev), and no anchor may be the text of a test-split query (the same
    question under another id is still the test set)."""
    split = mining_split(queries, split)
    for column in ("query_id", "anchor"):
        if column not in pairs.columns:
            raise FinetuneInputError(f"training pairs: missing column {column!r} (expected hard_negative_pairs' output)")
    split_of = dict(queries.select("query_id", "split").iter_rows())
    unknown = sorted({q for q in pairs["query_id"].to_list() if q not in split_of})
    if unknown:
        raise FinetuneInputError(f"training pairs name queries not in the dataset: {unknown[:5]} ({len(unknown)} in all)")
    elsewhere = sorted({q for q in pairs["query_id"].to_list() if split_of[q] != split})
    if elsewhere:
        raise HeldOutSplitError(f"{len(elsewhere)} training queries are not in the {split!r} split "
                                f"(first: {elsewhere[0]!r}, split {split_of[elsewhere[0]]!r}): refusing to train; "
                                f"the {HELD_OUT_SPLIT!r} split is held out")
    leaked = pairs.filter(_same_text_as_test(pairs, queries))
    if leaked.height:
        raise HeldOutSplitError(f"training query {leaked['query_id'][0]!r} has the text of a {HELD_OUT_SPLIT!r}-split "
                                f"query ({leaked['anchor'][0]!r}): refusing to train on held-out queries")


def _same_text_as_test(pairs: pl.DataFrame, queries: pl.DataFrame) -> pl.Series:
    """True for a triple whose query text (normalised_query_text) is also a test query's."""
    test = {normalised_query_text(t) for t in queries.filter(pl.col("split") == HELD_OUT_SPLIT)["text"].to_list()}
    return pl.Series([normalised_query_text(a) in test for a in pairs["anchor"].to_list()], dtype=pl.Boolean)


def drop_held_out_texts(pairs: pl.DataFrame, queries: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The triples without those whose query has the text of a test query (XQuAD asks some
    questions twice, under two ids), and how many were dropped. Mining leaves such queries out
    already (retbench.tasks.analysis.hard_negatives.mining_queries); this is for triples from elsewhere."""
    kept = pairs.filter(~_same_text_as_test(pairs, queries))
    return kept, pairs.height - kept.height


def finetune_provider(base: SentenceTransformersProvider, base_name: str, pairs: pl.DataFrame, queries: pl.DataFrame,
                      options: FinetunedOptions | dict, store: Path, force: bool = False,
                      progress: Callable[[str], None] | None = None, key_path: str = "options",
                      source_split: str | None = None) -> FinetunedModel:
    """Train (or find) the model for these inputs. `pairs`: hard_negative_pairs' output on the
    mining split (`source_split`, else train when `queries` have train queries, else dev);
    `queries`: the dataset's queries with their split (to refuse held-out ones);
    `key_path` names the spec entry in errors (e.g. providers[3].options)."""
    options = options if isinstance(options, FinetunedOptions) else FinetunedOptions(**options)
    say = progress or (lambda message: None)
    if type(base) is not SentenceTransformersProvider:
        raise FinetuneInputError(f"{key_path}.base: provider {base_name!r} (kind {base.kind!r}) cannot be fine-tuned; "
                                 "expected a local sentence-transformers model")
    source_split = mining_split(queries, source_split or options.source_split)
    check_training_queries(pairs, queries, source_split)
    if pairs.height < options.min_triples:
        raise FinetuneInputError(
            f"{key_path}.min_triples: {pairs.height} hard-negative triples were mined from "
            f"{pairs['query_id'].n_unique()} {source_split!r} queries, but at least {options.min_triples} are needed; "
            f"add judged {source_split} queries, raise {key_path}.max_per_query, or lower {key_path}.min_triples")
    triples = [_prefixed(t, base) for t in pairs.select(TRIPLET_KEYS).to_dicts()]
    base_fingerprint = full_fingerprint(base)
    triples_sha256 = stable_hash("triples", triples)
    hyperparameters = options.hyperparameters()
    key = finetune_key(base_fingerprint, triples_sha256, hyperparameters)
    folder = model_folder(store, key)
    record: dict = {}

    def build(tmp: Path) -> None:
        tmp.mkdir(parents=True)
        cpu_before = _cpu_seconds()
        log, seconds = _train(base.path, triples, options, tmp, say, _encode_length(base))
        cpu = _cpu_seconds() - cpu_before
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
        write_parquet(pl.DataFrame(log, schema={"step": pl.Int64, "epoch": pl.Float64, "loss": pl.Float64,
                                                "seconds": pl.Float64}), tmp / LOG_FILE)
        if not (tmp / WEIGHTS_FILE).is_file():
            raise RuntimeError(f"training wrote no {WEIGHTS_FILE} (found {sorted(p.name for p in (tmp / 'model').iterdir())})")
        write_json(tmp / TRAINING_RECORD, {
            "base": base_name, "base_fingerprint_hash": fingerprint_hash(base_fingerprint), "base_fingerprint": base_fingerprint,
            "source_split": source_split,
            "triples": len(triples), "triples_sha256": triples_sha256, "train_queries": sorted(set(pairs["query_id"].to_list())),
            "hyperparameters": hyperparameters, "train_seconds": seconds, "train_cpu_seconds": cpu, "threads": options.threads, "peak_rss_mb": peak,
            "query_prefix": base.options.query_prefix, "document_prefix": base.options.document_prefix,
            "dim": base.declared_dim(), "encode_max_seq_length": _encode_length(base), "versions": _versions(),
        })

    built = build_folder_once(store, folder, FOLDER_FILES, build, force=force)
    record = json.loads((folder / TRAINING_RECORD).read_text(encoding="utf-8"))
    log = pl.read_parquet(folder / LOG_FILE).to_dicts()
    say(f"fine-tune of {base_name}: {'trained' if built.computed else 'reused'} {folder.name} "
        f"({record['triples']} triples, {record['train_seconds']:.1f} s, peak RSS {record['peak_rss_mb']:.0f} MB)")
    return FinetunedModel(
        path=str(folder), key=key, computed=built.computed, seconds=built.seconds, base=base_name,
        source_split=record.get("source_split"),
        triples=record["triples"], triples_sha256=record["triples_sha256"], hyperparameters=record["hyperparameters"],
        train_seconds=record["train_seconds"], train_cpu_seconds=record.get("train_cpu_seconds"),
        peak_rss_mb=record["peak_rss_mb"],
        final_loss=log[-1]["loss"] if log else None, steps=len(log), log=log,
    )


def finetune_key(base_fingerprint: dict, triples_sha256: str, hyperparameters: dict) -> str:
    """What the trained weights depend on: the base model, the training triples, the hyperparameters."""
    # v2: the saved model encodes with the base's length, not the training length.
    return stable_hash("finetune-v2", base_fingerprint, triples_sha256, hyperparameters)


def model_folder(store: Path, key: str) -> Path:
    return Path(store) / "models" / f"finetuned-{key[:24]}"


def _prefixed(triple: dict, base: SentenceTransformersProvider) -> dict:
    """Train on the texts the model will encode: the base's query and document prefixes."""
    o = base.options
    return {"anchor": o.query_prefix + triple["anchor"], "positive": o.document_prefix + triple["positive"],
            "negative": o.document_prefix + triple["negative"]}


def _train(base_path: Path, triples: list[dict], options: FinetunedOptions, out: Path,
           say: Callable[[str], None], encode_length: int | None) -> tuple[list[dict], float]:
    """Train on CPU and save to out/model; (loss per logged step, seconds)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    try:
        import datasets  # noqa: F401
        import accelerate  # noqa: F401  (the trainer needs it; say so before loading the model)
    except ImportError as error:
        raise RuntimeError(f"fine-tuning needs the Python package {error.name!r}: pip install datasets accelerate "
                           "(keeping torch==2.13.0), then rerun") from error

    started = time.perf_counter()
    torch.manual_seed(options.seed)
    # One thread by default: on a machine whose cores are busy, torch's threads wait for each other
    # (measured on the sample at load ~11 on 2 cores: 2 threads took 844 s, 1 thread 160 s, same loss).
    # Not part of the key: it changes how fast the same weights come out, up to float rounding.
    threads = torch.get_num_threads()
    if options.threads:
        torch.set_num_threads(options.threads)
    try:
        return _fit(base_path, triples, options, out, say, encode_length, started)
    finally:
        torch.set_num_threads(threads)


def _fit(base_path: Path, triples: list[dict], options: FinetunedOptions, out: Path, say: Callable[[str], None],
         encode_length: int | None, started: float) -> tuple[list[dict], float]:
    from retbench.tasks.extras import require

    require("finetune")
    from datasets import Dataset as HFDataset
    from sentence_transformers import SentenceTransformer
    try:  # sentence-transformers >= 6 moved these; the old paths still work but warn
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.trainer import SentenceTransformerTrainer
        from sentence_transformers.sentence_transformer.training_args import (
            BatchSamplers, SentenceTransformerTrainingArguments,
        )
    except ImportError:
        from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
        from sentence_transformers.losses import MultipleNegativesRankingLoss
        from sentence_transformers.training_args import BatchSamplers
    from transformers import TrainerCallback

    model = SentenceTransformer(str(base_path), device="cpu", local_files_only=True)
    if options.max_seq_length:
        model.max_seq_length = options.max_seq_length  # training only: the cost grows with the tokens per text
    data = HFDataset.from_dict({k: [t[k] for t in triples] for k in TRIPLET_KEYS})
    log: list[dict] = []

    shown: list[Progress] = []  # made when the trainer knows its step count

    def say_with_loss(line: str) -> None:
        say(f"{line}, loss {log[-1]['loss']:.4f}" if log else line)

    class LossLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                log.append({"step": state.global_step, "epoch": float(state.epoch or 0), "loss": float(logs["loss"]),
                            "seconds": time.perf_counter() - started})

        def on_step_end(self, args, state, control, **kwargs):
            # A line at most every 10 s with the step count, ETA and loss; a stop request ends
            # the training here (nothing is saved: the next run trains again).
            if not shown:
                shown.append(Progress("fine-tune", state.max_steps, "steps", emit=say_with_loss, keeps=False))
            shown[0].advance()

    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "checkpoints"), num_train_epochs=options.epochs, per_device_train_batch_size=options.batch_size,
        learning_rate=options.lr, warmup_ratio=options.warmup_ratio, seed=options.seed, data_seed=options.seed,
        # No duplicate texts in a batch: MNRL would otherwise count a copy of the positive as a negative.
        batch_sampler=BatchSamplers.NO_DUPLICATES, logging_steps=1, save_strategy="no", report_to="none",
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data,
                                         loss=MultipleNegativesRankingLoss(model), callbacks=[LossLog()])
    trainer.train()
    if shown:
        shown[0].finish()
    model.max_seq_length = encode_length or model.max_seq_length  # saved with the base's length: it encodes what the base encodes
    model.save(str(out / "model"))
    import shutil

    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return log, time.perf_counter() - started


def _encode_length(base: SentenceTransformersProvider) -> int | None:
    """Tokens per text the base encodes with: the tuned model encodes the same, so the verdict
    compares weights, not truncation (the training length is a separate, cheaper setting)."""
    return base.options.max_seq_length or base._read_config().get("max_seq_length")


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children: on a shared machine the wall time
    says how busy the machine was, the CPU time what the training cost."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _versions() -> dict:
    import sentence_transformers
    import torch
    import transformers

    return {"sentence_transformers": sentence_transformers.__version__, "transformers": transformers.__version__,
            "torch": torch.__version__}


def write_training_tables(models: list[FinetunedModel] | dict[str, FinetunedModel], output_dir: Path) -> dict[str, str]:
    """`finetune_training.parquet`/`.csv` (one row per fine-tuned model: triples,
    hyperparameters, steps, final loss, seconds, peak RSS) and `finetune_loss.parquet` (the loss
    at every logged step, per model)."""
    output_dir = Path(output_dir)
    # A dict names each model's provider (the pipeline's case): a `provider` column leads both tables.
    named = list(models.items()) if isinstance(models, dict) else [(None, m) for m in models]
    lead = lambda frame, name: frame if name is None else frame.select(pl.lit(name).alias("provider"), pl.all())  # noqa: E731
    table = pl.concat([lead(m.table(), name) for name, m in named], how="diagonal_relaxed")
    losses = pl.concat([lead(pl.DataFrame(m.log, schema={"step": pl.Int64, "epoch": pl.Float64, "loss": pl.Float64,
                                                         "seconds": pl.Float64}).with_columns(base=pl.lit(m.base), key=pl.lit(m.key[:16])), name)
                        for name, m in named], how="diagonal_relaxed")
    from retbench.tasks.store.files import write_text

    return {
        "finetune_training": str(write_parquet(table, output_dir / "finetune_training.parquet")),
        "finetune_training_csv": str(write_text(output_dir / "finetune_training.csv", table.write_csv())),
        "finetune_loss": str(write_parquet(losses, output_dir / "finetune_loss.parquet")),
    }
