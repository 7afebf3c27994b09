"""API keys by reference: a spec names an environment variable or a Prefect Secret
block, never the key itself; the value is looked up only when a request needs it.

Keys travel as `pydantic.SecretStr` so an accidental repr or log shows `**********`,
and `redact` scrubs them from any text (error bodies, messages) before it is raised.
"""
from __future__ import annotations

import os
from typing import Any

import httpx
from pydantic import SecretStr


class SecretLookupError(RuntimeError):
    pass


def resolve_secret(env: str | None = None, block: str | None = None, what: str = "API key") -> SecretStr | None:
    """The secret named by `env` (an environment variable) or `block` (a Prefect Secret block).

    Returns None when neither is given. A name that is given but empty or missing is an
    error naming the variable or block (never its value).
    """
    if env and block:
        raise SecretLookupError(f"{what}: give api_key_env or api_key_secret, not both")
    if env:
        value = os.environ.get(env)
        if not value:
            raise SecretLookupError(f"{what}: environment variable {env} is not set (or empty)")
        return SecretStr(value)
    if block:
        try:
            # Imported here: loading a block talks to the Prefect API, which a run
            # that needs no key must never depend on.
            from prefect.blocks.system import Secret

            value = Secret.load(block).get()
        except Exception as error:  # the block may be missing or the API unreachable
            raise SecretLookupError(f"{what}: could not load Prefect Secret block {block!r} ({type(error).__name__})") from None
        if not isinstance(value, str) or not value:
            raise SecretLookupError(f"{what}: Prefect Secret block {block!r} holds no string value")
        return SecretStr(value)
    return None


def redact(text: str, *secrets: SecretStr | str | None) -> str:
    """`text` with every secret value replaced by `***`."""
    for secret in secrets:
        value = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def redact_url(url: str) -> str:
    """`url` with the value of every query parameter replaced by `***`: a URL may carry a key
    (`...?api_key=...`), and URLs go into fingerprints, manifests and messages."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return url
    if not parsed.query:
        return url
    names = "&".join(f"{name}=***" for name, _ in parsed.params.multi_items())
    return f"{parsed.copy_with(query=None, fragment=None)}?{names}"


def url_query_values(url: str) -> list[str]:
    """The query parameter values of `url` (to scrub from messages)."""
    try:
        return [value for _, value in httpx.URL(url).params.multi_items()]
    except (httpx.InvalidURL, TypeError):
        return []


def env_references(options: Any) -> list[tuple[str, str]]:
    """(option key, variable name) of every secret a provider's or reranker's validated
    options read from the environment: what a run will need set before it starts."""
    references = []
    env = getattr(options, "api_key_env", None)
    # An explicit Secret block wins over a kind's default variable (as in HttpProvider.api_key).
    if env and not (getattr(options, "api_key_secret", None) and "api_key_env" not in options.model_fields_set):
        references.append(("api_key_env", env))
    for field in ("secret_headers", "query_params_env", "secret_kwargs"):
        for name, variable in (getattr(options, field, None) or {}).items():
            references.append((f"{field}.{name}", variable))
    return references
