"""The documentation site builds with ``mkdocs build --strict`` (a broken link or anchor, or a page
left out of the nav, fails it), and the README's links into it resolve."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
README = ROOT / "README.md"

pytestmark = pytest.mark.unit

LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)|!\[[^\]]*\]\((?P<image>[^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {github_slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*$", text, flags=re.MULTILINE)}


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed")
def test_the_site_builds_strict(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "guide" / "tasks" / "index.html").is_file()


def test_the_readme_links_to_files_and_headings_that_exist():
    text = FENCE.sub("", README.read_text(encoding="utf-8"))
    checked = 0
    for match in LINK.finditer(text):
        target = match["target"] or match["image"]
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path, _, anchor = target.partition("#")
        file = (ROOT / path) if path else README
        assert file.exists(), f"README links to {target!r}: no such file"
        if anchor:
            assert anchor in anchors(file), f"README links to {target!r}: no such heading"
        checked += 1
    assert checked >= 20  # the README's feature tour links to the documentation


def test_every_test_file_the_docs_name_exists():
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    named = {
        (page.name, path)
        for page in pages
        for path in re.findall(r"\btests/[\w/]+\.py\b", page.read_text(encoding="utf-8"))
    }
    assert named, "no test file named"
    missing = sorted(f"{page}: {path}" for page, path in named if not (ROOT / path).is_file())
    assert not missing, missing


def test_the_docs_speak_of_the_product_only():
    """No design-document section numbers ("S2") or development rounds in what users read."""
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\bS\d+\b", text), f"{page.name} cites a section number"
        assert not re.search(r"\bround \d+\b|\bthis round\b", text, flags=re.IGNORECASE), page.name
