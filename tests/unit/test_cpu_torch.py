"""The CPU device layer must never install where an accelerator exists. No GPU exists here, so the
presence of one is stood in for at the exact place torch reports it (torch.cuda.is_available)."""
import pytest
import torch

from mindio_adaptor.core.process import cpu_torch


def test_refuses_to_install_when_a_gpu_is_present(monkeypatch):
    if cpu_torch.installed():
        pytest.skip("layer already installed in this process")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(RuntimeError, match="refusing to install the CPU device layer: an accelerator"):
        cpu_torch.install()
    assert not cpu_torch.installed()


def test_install_maps_cuda_to_cpu_and_uninstall_restores():
    if cpu_torch.accelerator_present():
        pytest.skip("needs a machine without accelerator")
    original = torch.cuda.current_device
    cpu_torch.install()
    try:
        assert torch.cuda.current_device() == 0
        t = torch.zeros(3, device="cuda")
        assert t.device.type == "cpu"
        assert t.cuda() is t
        assert t.to("cuda").device.type == "cpu"
        assert t.type() == "torch.cuda.FloatTensor"
        state = torch.cuda.get_rng_state()
        a = torch.rand(2)
        torch.cuda.set_rng_state(state)
        assert torch.equal(a, torch.rand(2))
    finally:
        cpu_torch.uninstall()
    assert torch.cuda.current_device is original
    assert torch.zeros(1).type() == "torch.FloatTensor"
