"""Where the importable Megatron lies, found without importing megatron.core (its modules would run before their
patches are applied): the portions of the `megatron` namespace package, in the order Python searches them."""
from pathlib import Path
from typing import List


def package_portions() -> List[Path]:
    """The folders of the `megatron` package ([] when it cannot be imported)."""
    try:
        import megatron
    except ImportError:
        return []
    return [Path(base) for base in megatron.__path__]
