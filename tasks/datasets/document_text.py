"""A corpus document as one string: what the chunker cuts and what fine-tuning triples quote."""
from __future__ import annotations


def document_text(title: str | None, text: str | None) -> str:
    """The string chunks are cut from and their offsets index into: title, blank line, text."""
    return "\n\n".join(part for part in (title, text) if part and part.strip())
