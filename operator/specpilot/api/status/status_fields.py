"""Constrained field types the status models share."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

Count = Annotated[int, Field(ge=0)]
ScopeName = Annotated[str, StringConstraints(max_length=63)]
Sentence = Annotated[str, StringConstraints(max_length=1024)]
