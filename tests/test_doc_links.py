"""Every link between the project's Markdown pages works: the file it names exists, and the heading its
`#anchor` names is on that page (anchors as GitHub makes them). Links outside the repository are not
fetched."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted(p for p in REPO.rglob("*.md") if not any(part.startswith(".") or part in ("node_modules", "runs")
                                                        for part in p.relative_to(REPO).parts))
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*#*$", text, flags=re.MULTILINE):
        base = slug(heading)
        name, n = base, 1
        while name in found:
            name, n = f"{base}-{n}", n + 1
        found.add(name)
    return found


def links(page: Path) -> list[str]:
    return _LINK.findall(_FENCE.sub("", page.read_text(encoding="utf-8")))


def test_the_pages_are_found() -> None:
    names = {str(p.relative_to(REPO)) for p in PAGES}
    assert {"README.md", "docs/cli.md", "docs/data-contracts.md", "prompts/README.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_of_a_page_works(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading #{anchor} in {where.relative_to(REPO)}")
    assert broken == []


@pytest.mark.parametrize(("heading", "anchor"), [
    ("The seeds' check: the RTX PRO 6000 figure against the B200 outcome",
     "the-seeds-check-the-rtx-pro-6000-figure-against-the-b200-outcome"),
    ("`python -m client.status`", "python--m-clientstatus"),
    ("Live token counts: `continuous_usage_stats` on and off", "live-token-counts-continuous_usage_stats-on-and-off"),
    ("1. Client cost: CPU per streamed chunk", "1-client-cost-cpu-per-streamed-chunk"),
])
def test_anchors_are_made_as_github_makes_them(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor
