"""docs/architecture.md names only paths that exist: every module, package, test or script it points to
(`recovery/flows`, `core/communication/comm_in_place`, `tests/unit/...`), so a move or a rename leaves no stale map."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(r"(?<![\w/.])((?:mindio_adaptor/)?(?:core|patches|ttp|launch|status|cli|upstream|policy|csrc|tests|"
                  r"scripts|bench|docs)/[\w/.]*\w)")


def named_paths(text: str) -> set:
    return {match.rstrip(".") for match in PATH.findall(text)}


def exists(name: str) -> bool:
    bases = [ROOT, ROOT / "mindio_adaptor", ROOT / "mindio_adaptor" / "patches"]
    return any((base / candidate).exists() for base in bases
               for candidate in (name, f"{name}.py", re.sub(r"\.\w+$", ".py", name)))


def test_every_path_the_architecture_page_names_exists():
    named = named_paths((ROOT / "docs" / "architecture.md").read_text())
    assert len(named) > 20  # the page is the map it claims to be
    assert sorted(name for name in named if not exists(name)) == []
