"""Source patches for users who build Megatron from their own tree (docs/upstream.md).

`patches/upstream/megatron-core-<X.Y>/` holds one unified diff per Megatron file that a registry
patch targets. Each diff adds a guarded import of `mindio_adaptor.upstream_hook` and a decorator
line `@_mindio_hook("<target>")` on every patched function; nothing else. `generate` writes the
diffs from the registry, `check` tells per hunk whether a tree has them, `apply` applies them.
"""
