"""`mindio-adaptor upstream check|apply --megatron-dir DIR`: the source patches of patches/upstream
for users who build Megatron from their own tree (docs/upstream.md).

Exit codes: 0 every hunk applied (after `apply`: applied now); 1 (`check` only) the patches can be
applied; 2 bad input (no such dir, not a Megatron tree, unsupported version); 3 a hunk conflicts
(`apply` changed nothing).
"""
import sys

from mindio_adaptor.upstream.tree import TreeError

EXIT_APPLICABLE, EXIT_BAD_INPUT, EXIT_CONFLICT = 1, 2, 3


def register(subparsers):
    p = subparsers.add_parser("upstream", help="check or apply the source patches for a Megatron tree")
    actions = p.add_subparsers(dest="upstream_action", metavar="ACTION", required=True)
    for name, func, text in [
            ("check", run_check, "per file and hunk: applied, applicable or conflicting; version supported?"),
            ("apply", run_apply, "apply the patches (all or nothing: a conflict changes no file)")]:
        a = actions.add_parser(name, help=text, description=text)
        a.add_argument("--megatron-dir", required=True, metavar="DIR",
                       help="the directory holding the megatron package (a Megatron-LM checkout)")
        a.add_argument("--patches-dir", metavar="DIR",
                       help="the patches/upstream folder (default: the one of this mindio_adaptor checkout)")
        a.set_defaults(func=func)


def _open(args):
    from mindio_adaptor.upstream import tree

    megatron = tree.open_tree(args.megatron_dir)
    return megatron, tree.patch_set_dir(megatron, args.patches_dir)


def run_check(args) -> int:
    from mindio_adaptor.upstream.check import APPLICABLE, CONFLICTING, check_tree

    try:
        megatron, folder = _open(args)
    except TreeError as exc:
        return _bad_input(exc)
    report = check_tree(megatron, folder)
    print_report(report)
    return {CONFLICTING: EXIT_CONFLICT, APPLICABLE: EXIT_APPLICABLE}.get(report.state, 0)


def run_apply(args) -> int:
    from mindio_adaptor.upstream.apply import ApplyRefused, apply_patch_set
    from mindio_adaptor.upstream.check import check_tree

    try:
        megatron, folder = _open(args)
    except TreeError as exc:
        return _bad_input(exc)
    before = check_tree(megatron, folder).counts()
    try:
        after = apply_patch_set(megatron, folder)
    except ApplyRefused as exc:
        print(f"mindio-adaptor upstream apply: refused, {exc}", file=sys.stderr)
        return EXIT_CONFLICT
    print_report(after)
    done = sum(before.values()) - before["applied"]
    print(f"applied {done} hunk(s) to {megatron.root}" if done else "nothing to do: already applied")
    return 0


def print_report(report):
    from mindio_adaptor.upstream.check import describe

    tree = report.tree
    print(f"megatron-core {tree.version_text} at {tree.root}: supported, patch set {report.patch_set}")
    for f in report.files:
        print(f.diff.path)
        for v in f.hunks:
            where = f"at line {v.line}" if v.line else v.reason
            print(f"  hunk {v.hunk.number:<2} {v.verdict:<11} {describe(v.hunk)} ({v.hunk.header} {where})")
    counts = report.counts()
    print(f"{report.state}: {counts['applied']} applied, {counts['applicable']} applicable, "
          f"{counts['conflicting']} conflicting")


def _bad_input(exc: Exception) -> int:
    print(f"mindio-adaptor upstream: {exc}", file=sys.stderr)
    return EXIT_BAD_INPUT
