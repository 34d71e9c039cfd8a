"""The reference's processor-side package name: `from mindio_ttp.framework_ttp import ...` and
`from mindio_ttp.framework_ttp.ttp_decorator import ...` both reach mindio_adaptor.ttp."""
from mindio_ttp.framework_ttp import ttp_decorator as _module
from mindio_ttp.framework_ttp.ttp_decorator import *  # noqa: F401,F403

__all__ = [name for name in vars(_module) if not name.startswith("_")]
