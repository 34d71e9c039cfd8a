"""Compatibility face: code written for the reference (`from mindio_ttp.framework_ttp import ...`)
runs on mindio_adaptor."""
