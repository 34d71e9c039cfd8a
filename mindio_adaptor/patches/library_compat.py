"""What older Megatron releases need from the newer libraries they now run with, on any device.

megatron-core 0.12 to 0.15 call `numpy.product` in their distributed checkpointing (every save of the
torch_dist format); NumPy 2 removed that alias of `numpy.prod`. It is put back only under those releases."""
import numpy

from mindio_adaptor.patches import megatron_versions

LAST_WITH_NUMPY_PRODUCT = (0, 15)


def restore_for_installed_megatron() -> None:
    series = megatron_versions.installed_series()
    if series is not None and series <= LAST_WITH_NUMPY_PRODUCT and not hasattr(numpy, "product"):
        numpy.product = numpy.prod
