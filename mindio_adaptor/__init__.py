"""mindio_adaptor: fault tolerance for Megatron-LM training.

    import mindio_adaptor
    mindio_adaptor.patch_all()   # before Megatron initialises
"""
__version__ = "0.1.0"


def patch_all():
    """Install every Megatron patch (idempotent). Safe before or after `import megatron`."""
    from mindio_adaptor.patches import registry

    registry.patch_all()


def unpatch_all():
    """Remove every patch installed by `patch_all()`, restoring Megatron's originals."""
    from mindio_adaptor.patches import registry

    registry.unpatch_all()
