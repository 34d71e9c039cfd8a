"""Compatibility face: code written for the reference's older exception-checkpoint API
(`from mindx_elastic.torch_exception_module import exception_checkpoint`) runs on mindio_adaptor."""
