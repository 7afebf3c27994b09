"""The spec's `judgments:` key: which judgments a run scores with, the dataset's own (`use: base`)
or those plus the overlays `retbench judge import` added to the store for it (`use: all`, the
default); `overlays:` narrows `all` to the overlays named."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from retbench.tasks.config.spec_errors import AtKey


class JudgmentsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    use: Literal["base", "all"] = Field(
        "all", description="all: the dataset's judgments plus every overlay imported for it (or those named in "
                           "`overlays`); base: the dataset's own judgments only")
    overlays: list[str] | None = Field(
        None, min_length=1, description="with use: all, only these overlays, each named by its source label or the "
                                        "imported file's name (default: every overlay imported for the dataset)")

    @model_validator(mode="after")
    def _consistent(self):
        if self.overlays is None:
            return self
        if self.use == "base":
            raise AtKey("overlays", "names overlays, but use is base (which scores the dataset's own judgments "
                                    "only); drop one of the two")
        for i, name in enumerate(self.overlays):
            if not name.strip():
                raise AtKey(f"overlays[{i}]", "an empty name; expected a source label or an imported file's name")
            if self.overlays.index(name) != i:
                raise AtKey(f"overlays[{i}]", f"{name!r} repeats overlays[{self.overlays.index(name)}]")
        return self
