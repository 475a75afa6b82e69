"""The documentation's generated reference pages: checked in as the generator writes them now, the
decision rules in RULES' order, and every field and CEL rule of the CRD on the API page."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from tools import docs_reference

from specpilot.analysis.decision import RULES
from specpilot.api import crd


@pytest.mark.parametrize("page", sorted(docs_reference.pages()), ids=lambda page: page.name)
def test_checked_in_page_is_current(page: Path) -> None:
    assert page.is_file(), f"{page.relative_to(docs_reference.ROOT)} is missing: run `make docs-reference`"
    assert page.read_text() == docs_reference.pages()[page], (
        f"{page.relative_to(docs_reference.ROOT)} is stale: run `make docs-reference` (or `make crd`)"
    )


def test_decision_rules_are_listed_in_the_order_rules_tries_them() -> None:
    headings = re.findall(r"^## \d+\. `(\w+)`$", docs_reference.decision_rules(), flags=re.MULTILINE)
    assert headings == [rule.__name__ for rule in RULES]


def _paths(node: Mapping[str, Any], path: str) -> Iterator[str]:
    yield path
    for name, child in node.get("properties", {}).items():
        yield from _paths(child, f"{path}.{name}")
    if "properties" in node.get("items", {}):
        yield from _paths(node["items"], f"{path}[]")


def _rules(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        yield from (rule["rule"] for rule in node.get("x-kubernetes-validations", []))
        for value in node.values():
            yield from _rules(value)
    elif isinstance(node, list):
        for value in node:
            yield from _rules(value)


def test_api_page_lists_every_field_and_every_cel_rule() -> None:
    schema = crd.openapi_schema()
    page = docs_reference.api()
    fields = [path for part in ("spec", "status") for path in _paths(schema["properties"][part], part)]
    assert len(fields) > 100
    assert [path for path in fields if f"- `{path}` (" not in page] == []
    rules = list(_rules(schema))
    assert len(rules) > 20
    assert [rule for rule in rules if rule not in page] == []
