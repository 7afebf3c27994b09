"""Spec-load checks of the cheaper and fine-tuned variants of a provider, which need to know the
provider (its declared dimension, whether it can be fine-tuned): errors name the key path."""
from __future__ import annotations


def variant_errors(spec) -> list[str]:
    """Problems with `providers[i].dimensions` (larger than the model's declared dimension) and
    with `kind: finetuned` providers (their base, and the split they need)."""
    from retbench.tasks.providers import create_provider

    problems = finetune_errors(spec)
    for i, provider in enumerate(spec.providers):
        if provider.dimensions is None:
            continue
        try:
            declared = create_provider(provider.kind, provider.options).declared_dim()
        except (OSError, RuntimeError, ValueError):
            continue  # a model folder that is missing is reported by the embed stage, with its fix
        if declared is not None and provider.dimensions > declared:
            problems.append(f"providers[{i}].dimensions: {provider.dimensions} is larger than the dimension of "
                            f"provider {provider.name!r} ({declared}); expected at most {declared}")
    return problems


def finetune_errors(spec) -> list[str]:
    """A `finetuned` provider needs a base that names a local sentence-transformers provider of
    the spec, and `dataset.split: all`: mining takes the train queries (else the dev ones) and
    must see every test query to keep it out of training, by id and by text.
    How many triples the run yields is known only once the base has been run: the
    fine-tune step refuses too few then (options.min_triples), before training."""
    from retbench.tasks.providers import provider_class
    from retbench.tasks.providers.finetuned import TUNABLE_KINDS

    by_name = {p.name: (i, p) for i, p in enumerate(spec.providers)}
    problems = []
    for i, provider in enumerate(spec.providers):
        if provider.kind != "finetuned":
            continue
        where = f"providers[{i}].options"
        base = provider.options.get("base")
        if base not in by_name:
            problems.append(f"{where}.base: {base!r} is not a provider of this spec (expected one of {sorted(by_name)})")
            continue
        j, base_spec = by_name[base]
        if base_spec.kind not in TUNABLE_KINDS:
            from retbench.tasks.providers.http_base import HttpProvider

            what = "an HTTP provider: its weights are not here to train" if issubclass(
                provider_class(base_spec.kind), HttpProvider) else "not a local sentence-transformers model"
            problems.append(f"{where}.base: provider {base!r} (providers[{j}], kind {base_spec.kind!r}) cannot be "
                            f"fine-tuned: {what}; expected a provider of kind {' or '.join(TUNABLE_KINDS)}")
        if base_spec.dimensions is not None:
            problems.append(f"{where}.base: provider {base!r} truncates its vectors (dimensions: {base_spec.dimensions}); "
                            "fine-tune the full model and set dimensions on the finetuned provider instead")
        if provider.options.get("model") is not None:
            problems.append(f"{where}.model: set by the fine-tune step (the stored folder it trains), not in the spec")
        if spec.dataset.split != "all":
            problems.append(f"{where}: fine-tuning mines the train split (else dev) and keeps every test query out "
                            f"of training, by id and by text, so it needs them all loaded, but dataset.split is "
                            f"{spec.dataset.split!r}; use split: all (train on train or dev, judge on test)")
    return problems
