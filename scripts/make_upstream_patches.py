#!/usr/bin/env python3
"""Regenerate patches/upstream/megatron-core-<X.Y>/ from the patch registry (docs/upstream.md).

    python scripts/make_upstream_patches.py            # write the diffs for the installed Megatron
    python scripts/make_upstream_patches.py --check    # exit 1 if the shipped diffs are out of date

The diffs are made against a pristine tree: by default the installed megatron-core, or --megatron-dir.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mindio_adaptor.patches.registry import all_patches  # noqa: E402
from mindio_adaptor.upstream import generate, tree  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megatron-dir", help="pristine tree holding megatron/ (default: the installed one)")
    parser.add_argument("--out", default=str(tree.default_patches_root()), help="patches/upstream folder")
    parser.add_argument("--check", action="store_true", help="only report stale diffs")
    args = parser.parse_args(argv)
    source = tree.open_tree(args.megatron_dir) if args.megatron_dir else tree.installed_tree()
    diffs = generate.make_patch_set(source, all_patches())
    folder = generate.patch_set_folder(Path(args.out), source)
    if args.check:
        stale = generate.differences(folder, diffs)
        for name in stale:
            print(f"out of date: {folder / name}")
        return 1 if stale else 0
    for name in generate.write(folder, diffs):
        print(f"{'wrote' if name in diffs else 'removed'} {folder / name}")
    print(f"{len(diffs)} diffs for megatron-core {source.version_text} in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
