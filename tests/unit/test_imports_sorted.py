"""The package's imports stay in one order (isort, configured in pyproject.toml): moving modules rewrites import
lines, and unsorted ones hide what a module depends on. `isort mindio_adaptor mindio_ttp mindx_elastic` fixes
what this finds."""
from pathlib import Path

import isort

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mindio_adaptor", "mindio_ttp", "mindx_elastic")


def test_every_module_of_the_package_has_its_imports_sorted():
    config = isort.Config(settings_path=str(ROOT))
    files = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 100
    unsorted = [str(path.relative_to(ROOT)) for path in files
                if not isort.check_file(path, config=config, show_diff=False)]
    assert unsorted == [], f"imports not sorted (run isort on them): {unsorted}"
