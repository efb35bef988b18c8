"""The front door and the reference pages hold together: README.md stays short with the map of the
code before any reference, every link between the pages leads somewhere, and docs/api.md has a
section per API, each saying whose behaviour it follows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.daphne_server import REPO

PAGES = ("README.md", "docs/api.md", "docs/configuration.md")


def headings(text: str) -> list[str]:
    return re.findall(r"^#{1,6} (.+)$", text, re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_is_a_front_door_with_the_layout_third():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    sections = re.findall(r"^## (.+)$", readme, re.M)
    assert sections[:3] == ["What it is", "Two commands", "Layout"], sections
    assert sections.index("Layout") < sections.index("Settings you will set")


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_leads_to_a_file_and_a_heading(page):
    path = REPO / page
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{page} links to {file}, which does not exist"
        if anchor:
            assert anchor in {slug(h) for h in headings(Path(linked).read_text())}, (
                f"{page}: no heading #{anchor} in {file or page}"
            )


def test_the_api_page_has_a_section_per_api_and_says_whose_behaviour_each_follows():
    text = (REPO / "docs/api.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    titles = [s.splitlines()[0] for s in sections]
    for api in ("OpenAI chat", "Responses", "Anthropic Messages", "Embeddings", "infill", "Tokenize", "/generate", "Stats"):
        [section] = [s for t, s in zip(titles, sections, strict=True) if api in t]
        assert "**Follows**" in section, f"docs/api.md's section on {api} says nothing of the peers"
