"""`kind: python`: your own model as a Python function, class or object, with no glue code.

`options.callable` names it as "module:attribute" (found next to the spec first, then in the spec's
python_path, then on sys.path); `retbench.run(providers={...})` hands a live object instead
(`options.object`). What it names is adapted once, here:

- a function `f(texts)` or `f(texts, role)` (role "query" or "document"), `kwargs` passed on each call;
- a factory (a function callable with `kwargs` alone, or a class), called once with `kwargs`, whose
  result is adapted in turn;
- a BEIR-style object: `encode_queries(list[str])` and `encode_corpus(list[dict])`;
- a sentence-transformers-style object with `encode_query` / `encode_document`;
- an MTEB- or sentence-transformers-style object with `encode(texts, ...)`, told the role through
  its signature (`prompt_type`, `role`, or `prompt_name` when the object has such prompts).

Vectors may be lists, numpy arrays or torch tensors; the pipeline normalises, caches and batches
them as for any provider. The cache identity: the import name, `kwargs`, `version` and the digest
of the code (tasks/user_code.py), or for a live object its name, code and a probe of its vectors.
"""
from __future__ import annotations

import contextlib
import enum
import inspect
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from functools import cached_property
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from pydantic import Field

from retbench.tasks.providers.base import BatchResult, Provider, Role, estimate_tokens
from retbench.tasks.user_code import (UserCodeError, UserCodeOptions, as_matrix, is_live, keep_live, live_object,
                                      probe_signature, raised)

PROBE = {"query": "what does a probe text look like?", "document": "A probe document: retbench embeds it once."}


class PythonOptions(UserCodeOptions):
    threads: int = Field(1, ge=1, le=64, description="calls at once (for code that waits on a server or releases the GIL)")


class PythonProvider(Provider):
    kind = "python"
    Options = PythonOptions

    def __init__(self, **options):
        super().__init__(**options)
        self._encoder: Encoder | None = None
        self._counted: dict[str, dict[str, int]] = {}  # role -> text -> tokens of the last plan, not yet encoded
        self._loading = threading.Lock()
        self._fingerprint: dict | None = None

    @classmethod
    def for_object(cls, obj: Any, name: str, **options) -> "PythonProvider":
        """A provider for a live object (the Python API), kept for this process."""
        return cls(object=keep_live(obj, name), **options)

    def fingerprint(self) -> dict:
        o = self.options
        if o.callable is None:
            if self._fingerprint is None:  # a live object's code does not change under it
                self._fingerprint = o.identity(self.kind, probe=self._probe)
            return self._fingerprint
        fingerprint = o.identity(self.kind)
        if self._fingerprint is not None and fingerprint != self._fingerprint:
            self._encoder = None  # its code changed on disk since it was loaded: load it again
        self._fingerprint = fingerprint
        return fingerprint

    def _probe(self) -> str:
        # Two models loaded by one function read the same: what they return tells them apart.
        return probe_signature(np.vstack([self.encode([PROBE[role]], role) for role in ("query", "document")]))

    def declared_dim(self) -> int | None:
        if self.options.object is not None and is_live(self.options.object):
            get_dim = getattr(live_object(self.options.object, self.options.where), "get_sentence_embedding_dimension", None)
            if callable(get_dim):
                try:
                    return int(get_dim())
                except Exception:  # noqa: BLE001  a guess, not a requirement
                    return None
        return None

    def encoder(self) -> "Encoder":
        with self._loading:
            if self._encoder is None:
                o = self.options
                with redacting(self._secrets):
                    self._encoder = adapt(o.target(), {**o.kwargs, **self._secrets}, o.factory, o.described)
        return self._encoder

    @cached_property
    def _secrets(self) -> dict[str, str]:
        return secret_values(self.options)

    def encode(self, texts: list[str], role: Role) -> np.ndarray:
        encoder = self.encoder()
        with redacting(self._secrets):
            return encoder.encode(list(texts), role)

    def encode_batches(self, batches: Sequence[list[str]], role: Role) -> Iterator[tuple[int, BatchResult]]:
        if self.options.threads == 1:
            yield from super().encode_batches(batches, role)
            return
        encoder = self.encoder()

        def one(batch: list[str]) -> BatchResult:
            started = time.perf_counter()
            with redacting(self._secrets):
                vectors = encoder.encode(list(batch), role)
            seconds = time.perf_counter() - started
            counts, source = self.token_counts(batch, role)
            return BatchResult(vectors, int(sum(counts)), source, seconds, row_tokens=tuple(counts))

        # At most `threads` calls in flight; results handed over as they complete. Closing the
        # generator (a stop, or a failure) cancels the calls not yet started.
        pool = ThreadPoolExecutor(self.options.threads, thread_name_prefix="retbench-python")
        pending: dict[Future, int] = {}
        queue = iter(enumerate(batches))
        try:
            while True:
                while len(pending) < self.options.threads:
                    nxt = next(queue, None)
                    if nxt is None:
                        break
                    pending[pool.submit(one, list(nxt[1]))] = nxt[0]
                if not pending:
                    return
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=pending.get):
                    yield pending.pop(future), future.result()
        finally:
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)

    def plan_batches(self, texts: Sequence[str], role: Role, batch_size: int) -> list[list[int]]:
        """With a tokenizer (a sentence-transformers model): batches of texts of about as many
        tokens, as the built-in provider plans them (a batch is padded to its longest text), the
        counts kept for the cost ledger. Without one: `batch_size` texts at a time, in the embed
        stage's order (by characters)."""
        encoder = self.encoder()
        if encoder.tokenizer is None:
            return super().plan_batches(texts, role, batch_size)
        counts, source = self.token_counts(texts, role)
        if source != "tokenizer":
            return super().plan_batches(texts, role, batch_size)
        self._counted[role] = dict(zip(texts, counts))
        limit = encoder.window or max(counts, default=0)
        order = sorted(range(len(texts)), key=lambda i: min(counts[i], limit))
        return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]

    def token_counts(self, texts: Sequence[str], role: Role) -> tuple[list[int], str]:
        counted = self._counted.get(role, {})
        if counted and all(text in counted for text in texts):  # a batch of the last plan: counted once
            return [counted.pop(text) for text in texts], "tokenizer"
        encoder = self._encoder
        if encoder is not None and encoder.tokenizer is not None:
            try:
                # Only the ids: masks and type ids as Python lists cost a third of the time.
                ids = encoder.tokenizer(list(texts), add_special_tokens=True, return_attention_mask=False, verbose=False,
                                        return_token_type_ids=False)["input_ids"]
                return [len(row) for row in ids], "tokenizer"
            except Exception:  # noqa: BLE001  a tokenizer of another shape: fall back to the estimate
                encoder.tokenizer = None
        return [estimate_tokens(text) for text in texts], "estimate"

    def input_window(self) -> int | None:
        encoder = self._encoder
        return encoder.window if encoder is not None and encoder.tokenizer is not None else None

    def without_window(self) -> str:
        return "no input window known (a python callable); none counted as truncated"


def secret_values(options: UserCodeOptions) -> dict[str, str]:
    """secret_kwargs resolved from the environment: kwarg name -> value (a missing variable is refused)."""
    from retbench.tasks.providers.secrets import resolve_secret

    return {name: resolve_secret(env=variable, what=f"{options.where} secret_kwargs.{name}").get_secret_value()
            for name, variable in options.secret_kwargs.items()}


@contextlib.contextmanager
def redacting(secrets: dict[str, str]):
    """A UserCodeError raised inside says *** where its message held a secret's value (an
    exception of the user's code may quote the key it was given)."""
    try:
        yield
    except UserCodeError as error:
        if not secrets:
            raise
        from retbench.tasks.providers.secrets import redact

        raise UserCodeError(redact(str(error), *secrets.values())) from error.__cause__


# ---------------------------------------------------------------- adapting what the callable names


class Encoder:
    """(texts, role) -> checked (n, dim) float32 vectors, for one adapted user object."""

    def __init__(self, call: Callable[[list[str], str], Any], where: str, what: str, source: Any = None):
        self.call, self.where, self.what = call, where, what
        self._dim: int | None = None
        # A sentence-transformers model counts its tokens and states its window.
        self.tokenizer = getattr(source, "tokenizer", None) if callable(getattr(source, "tokenizer", None)) else None
        window = getattr(source, "max_seq_length", None)
        self.window = window if isinstance(window, int) else None

    def encode(self, texts: list[str], role: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        try:
            value = self.call(texts, role)
        except UserCodeError:
            raise
        except Exception as error:  # noqa: BLE001  the user's code raised: one line naming it
            raise raised(self.where, error, f"on a batch of {len(texts)} {role} texts") from error
        vectors = as_matrix(value, len(texts), self.where)
        if self._dim is None:
            self._dim = vectors.shape[1]
        elif vectors.shape[1] != self._dim:
            raise UserCodeError(f"{self.where} returned {vectors.shape[1]}-dimensional vectors after "
                                f"{self._dim}-dimensional ones (a batch of {len(texts)} {role} texts)")
        return vectors


def adapt(target: Any, kwargs: dict, factory: bool | None, where: str) -> Encoder:
    """An Encoder for a function, factory, class or model object (see the module's docstring)."""
    if inspect.isclass(target):
        return adapt(_made(target, kwargs, where), {}, False, where)
    encoder = _object_encoder(target, where)
    if encoder is not None:
        if kwargs:
            raise UserCodeError(f"{where}: kwargs are given but {type(target).__name__} is already an object; kwargs "
                                f"go to a function, a factory or a class")
        return encoder
    if not callable(target):
        raise UserCodeError(f"{where}: {type(target).__name__} is neither a function nor an object with encode, "
                            f"encode_queries/encode_corpus or encode_query/encode_document")
    if factory is None:
        factory = _callable_with(target, kwargs)
    if factory:
        return adapt(_made(target, kwargs, where), {}, False, where)
    return _function_encoder(target, kwargs, where)


def _made(factory: Callable, kwargs: dict, where: str) -> Any:
    try:
        return factory(**kwargs)
    except Exception as error:  # noqa: BLE001
        raise raised(where, error, f"when called with kwargs {sorted(kwargs)} to make the model") from error


def _callable_with(function: Callable, kwargs: dict) -> bool:
    """True when `function(**kwargs)` is a complete call (a factory); False when it needs more (the texts)."""
    try:
        inspect.signature(function).bind(**kwargs)
        return True
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): treat as f(texts)
        return False


def _function_encoder(function: Callable, kwargs: dict, where: str) -> Encoder:
    """f(texts), f(texts, role) or f(texts, role=...), with `kwargs` on every call."""
    parameters = [p for p in _parameters(function).values() if p.name not in kwargs]
    role = next((p for p in parameters if p.name == "role"), None)
    if role is not None and role.kind is not role.POSITIONAL_ONLY:
        return Encoder(lambda texts, role: function(texts, role=role, **kwargs), where, "function(texts, role=)")
    required = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    if len(required) >= 2:
        return Encoder(lambda texts, role: function(texts, role, **kwargs), where, "function(texts, role)")
    return Encoder(lambda texts, role: function(texts, **kwargs), where, "function(texts)")


def _object_encoder(obj: Any, where: str) -> Encoder | None:
    if callable(getattr(obj, "encode_queries", None)) and callable(getattr(obj, "encode_corpus", None)):
        queries, corpus = obj.encode_queries, obj.encode_corpus

        def beir(texts: list[str], role: str) -> Any:
            if role == "query":
                return queries(texts, **_batch_keyword(queries, len(texts)))
            documents = [{"title": "", "text": text} for text in texts]
            return corpus(documents, **_batch_keyword(corpus, len(texts)))

        return Encoder(beir, where, "encode_queries/encode_corpus", obj)
    if callable(getattr(obj, "encode_query", None)) and callable(getattr(obj, "encode_document", None)):
        by_role = {"query": obj.encode_query, "document": obj.encode_document}
        return Encoder(lambda texts, role: by_role[role](texts, **_quiet(by_role[role])), where,
                       "encode_query/encode_document", obj)
    if callable(getattr(obj, "encode", None)):
        encode = obj.encode
        return Encoder(lambda texts, role: encode(texts, **_role_keywords(obj, encode, role)), where, "encode", obj)
    return None


def _parameters(function: Callable) -> dict[str, inspect.Parameter]:
    """The signature's parameters, annotations evaluated where they can be (a module written with
    `from __future__ import annotations` holds them as strings)."""
    try:
        return dict(inspect.signature(function, eval_str=True).parameters)
    except Exception:  # noqa: BLE001  an annotation that does not evaluate: its text is enough
        try:
            return dict(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            return {}


def _batch_keyword(function: Callable, size: int) -> dict:
    # BEIR's models take batch_size (often positionally required); one call per retbench batch.
    return {"batch_size": size} if "batch_size" in _parameters(function) else {}


def _quiet(function: Callable) -> dict:
    return {"show_progress_bar": False} if "show_progress_bar" in _parameters(function) else {}


def _role_keywords(obj: Any, encode: Callable, role: str) -> dict:
    """The keywords that tell an `encode` the role, as far as its signature has one."""
    parameters = _parameters(encode)
    keywords = _quiet(encode)
    if "prompt_type" in parameters:  # MTEB: a PromptType enum whose members are query and passage/document
        keywords["prompt_type"] = _prompt_type(parameters["prompt_type"], role)
    elif "role" in parameters:
        keywords["role"] = role
    elif "prompt_name" in parameters:
        prompts = getattr(obj, "prompts", None) or {}
        for name in ((role,) if role == "query" else ("document", "passage", "corpus")):
            if name in prompts:
                keywords["prompt_name"] = name
                break
    if "task_name" in parameters and parameters["task_name"].default is inspect.Parameter.empty:
        keywords["task_name"] = "retbench"  # MTEB 1.x asks for the task's name
    return keywords


def _prompt_type(parameter: inspect.Parameter, role: str) -> Any:
    annotation = parameter.annotation
    for candidate in getattr(annotation, "__args__", (annotation,)):
        if inspect.isclass(candidate) and issubclass(candidate, enum.Enum):
            names = ("query",) if role == "query" else ("document", "passage", "corpus")
            for name in names:
                if name in candidate.__members__:
                    return candidate[name]
    return role


__all__ = ["PythonProvider", "PythonOptions", "adapt", "Encoder"]
