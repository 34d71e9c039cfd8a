"""core/detection/faults.py: which ReportState each device's failure text is, rule order, user rules, chains,
and the real gloo errors of a dying or stalled peer."""
import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mindio_adaptor.core.detection import faults
from mindio_adaptor.core.detection.faults import BUILTIN_RULES, FaultClassifier, exception_chain
from mindio_adaptor.ttp.enums import ReportState as S

# Observed with torch 2.13.0+cpu, 2 gloo processes on localhost, timeout 3 s (see _gloo_worker below):
GLOO_PEER_KILLED = (  # peer SIGKILLed or os._exit() before the survivor's all_reduce / barrier
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:26329. This is typically caused by a remote worker crashing. Check the logs of the remote "
    "worker before reporting an error. GLHF! \U0001F3D6\ufe0f")
GLOO_PEER_RESET = (  # peer os._exit() or SIGKILLed while the survivor was reading (a race with the above)
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:9095: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the "
    "application. Check the logs of the remote worker before reporting an error. GLHF! \U0001F3D6\ufe0f")
GLOO_RECV_TIMEOUT = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
                     "Timed out waiting 3000ms for recv operation to complete")  # all_reduce/barrier, peer asleep
GLOO_SEND_TIMEOUT = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] "
                     "Timed out waiting 3000ms for send operation to complete")  # 16 MiB send, peer asleep
STORE_CLIENTS_TIMEOUT = "Timed out after 4 seconds waiting for clients. 1/2 clients joined."  # DistStoreError, init
STORE_WAIT_TIMEOUT = "wait timeout after 3000ms, keys: /default_pg/0//1//cpu//0/1"  # DistStoreError, new_group

# Data, not observed here (no GPU): torch c10d NCCLUtils/ProcessGroupNCCL message formats, NCCL's
# ncclResult_t texts, and cudaGetErrorString texts as torch prints them.
NCCL_REMOTE = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, remote process exited or "
               "there was a network error, NCCL version 2.26.2\nncclRemoteError: A call failed possibly due to a "
               "network error or a remote process exiting prematurely.")
NCCL_SYSTEM = ("NCCL error in: ProcessGroupNCCL.cpp:3690, unhandled system error\nncclSystemError: System call "
               "(e.g. socket, malloc) or external library call failed or device error. ")
NCCL_CUDA = "NCCL error in: ProcessGroupNCCL.cpp:1, unhandled cuda error\nncclUnhandledCudaError: Call to CUDA function failed."
NCCL_ABORTED = "NCCL communicator was aborted on rank 3. Original reason for failure was: ..."
NCCL_WATCHDOG = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, "
                 "NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before "
                 "timing out.")
NCCL_ASYNC = ("Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
              "subsequent GPU operations might run on corrupted/incomplete data.")
CUDA_ECC = "CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors might be asynchronously reported"
CUDA_ILLEGAL = "CUDA error: an illegal memory access was encountered"
CUDA_LAUNCH = "CUDA error: unspecified launch failure"
CUDA_NVLINK = "CUDA error: uncorrectable NVLink error detected during the execution"
CUDA_CONTAINED = ("CUDA error: An exception occurred on the device that is now contained by the GPU's error "
                  "containment capability. This leaves the process in an inconsistent state")
CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB"


@pytest.mark.parametrize("text,state", [
    # the reference's texts (§5), embedded as real messages embed them
    ("UCE ERROR on device 3", S.UCE), ("HBM MULTI BIT ECC", S.UCE), ("FORCE STOP at step 9", S.NORMAL),
    ("ARF FINISH", S.PREREPAIR_FINISH), ("STEP FINISH", S.STEP_FINISH),
    ("HCCL OP RETRY FAILED", S.HCCL_FAILED), ("SUSPECT REMOTE ERROR", S.HCCL_FAILED),
    ("UB LINK ERROR", S.HCCL_FAILED), ("HCCS LINK ERROR", S.HCCL_FAILED), ("Other ERROR", S.UNKNOWN),
    # gloo, observed
    (GLOO_PEER_KILLED, S.HCCL_FAILED), (GLOO_PEER_RESET, S.HCCL_FAILED),
    (GLOO_RECV_TIMEOUT, S.HCCL_FAILED), (GLOO_SEND_TIMEOUT, S.HCCL_FAILED),
    # NCCL
    (NCCL_REMOTE, S.HCCL_FAILED), (NCCL_SYSTEM, S.HCCL_FAILED), (NCCL_CUDA, S.HCCL_FAILED),
    (NCCL_ABORTED, S.HCCL_FAILED), (NCCL_WATCHDOG, S.HCCL_FAILED), (NCCL_ASYNC, S.HCCL_FAILED),
    # CUDA device errors: memory → UCE; fatal, context-poisoning → UNKNOWN; OOM is no hardware fault
    (CUDA_ECC, S.UCE), ("HIP error: uncorrectable ECC error encountered", S.UCE),
    (CUDA_ILLEGAL, S.UNKNOWN), (CUDA_LAUNCH, S.UNKNOWN), (CUDA_NVLINK, S.UNKNOWN), (CUDA_CONTAINED, S.UNKNOWN),
    (CUDA_OOM, S.UNKNOWN),
    # a device fault named inside a NCCL error is the device fault
    (NCCL_CUDA + "\nLast error:\nCuda failure 'uncorrectable ECC error encountered'", S.UCE),
])
def test_builtin_table(text, state):
    assert faults.classify_text(text).state == state
    assert faults.classify_exception(RuntimeError(text)).state == state


def test_each_builtin_rule_is_reachable_and_names_its_source():
    for rule in BUILTIN_RULES:
        assert rule.source, rule
        assert FaultClassifier().classify_text(rule.text).rule == rule, f"{rule.text!r} is shadowed"


@pytest.mark.parametrize("exc,state", [
    (dist.DistStoreError(STORE_CLIENTS_TIMEOUT), S.HCCL_FAILED),  # observed, the type decides
    (dist.DistStoreError(STORE_WAIT_TIMEOUT), S.HCCL_FAILED),
    (dist.DistNetworkError("Connection reset by peer"), S.HCCL_FAILED),
    (dist.DistBackendError("anything at all"), S.HCCL_FAILED),
    (dist.DistBackendError(CUDA_ECC), S.UCE),  # text rules come before type rules
    (torch.OutOfMemoryError(CUDA_OOM), S.UNKNOWN),
    (torch.AcceleratorError(CUDA_ILLEGAL), S.UNKNOWN),
    (torch.AcceleratorError(CUDA_ECC), S.UCE),
    (ValueError("UCE ERROR"), S.UNKNOWN),  # only RuntimeErrors are matched, as the reference
    (TimeoutError("for recv operation to complete"), S.UNKNOWN),
])
def test_exception_types(exc, state):
    assert faults.classify_exception(exc).state == state


def _raise_from(outer, inner):
    try:
        raise inner
    except BaseException as cause:
        try:
            raise outer from cause
        except BaseException as exc:
            return exc


def _raise_during(outer, inner, suppress=False):
    try:
        raise inner
    except BaseException:
        try:
            if suppress:
                raise outer from None
            raise outer
        except BaseException as exc:
            return exc


def test_the_chain_is_followed_through_cause_and_context():
    wrapped = _raise_from(SystemExit("controller ended training"), RuntimeError(GLOO_PEER_KILLED))
    result = faults.classify_exception(wrapped)
    assert result.state == S.HCCL_FAILED and str(result.matched) == GLOO_PEER_KILLED
    during = _raise_during(KeyError("cleanup failed"), RuntimeError("UCE ERROR"))
    assert faults.classify_exception(during).state == S.UCE
    suppressed = _raise_during(KeyError("x"), RuntimeError("UCE ERROR"), suppress=True)
    assert faults.classify_exception(suppressed).state == S.UNKNOWN
    typed = _raise_from(ValueError("bad batch"), dist.DistStoreError(STORE_WAIT_TIMEOUT))
    assert faults.classify_exception(typed).state == S.HCCL_FAILED


def test_a_cyclic_chain_terminates():
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert [str(e) for e in exception_chain(a)] == ["a", "b"]
    assert faults.classify_exception(a).state == S.UNKNOWN


def test_user_rules_come_first_in_registration_order_and_carry_their_handle():
    table = FaultClassifier()
    seen = []
    table.add_pattern("Connection closed", "NORMAL", handle=seen.append)
    table.add_pattern("Connection closed by peer", S.UCE)
    result = table.classify(RuntimeError(GLOO_PEER_KILLED))
    assert result.state == S.NORMAL and result.rule.source == "user"
    result.handle(result.matched)
    assert seen and str(seen[0]) == GLOO_PEER_KILLED
    # a user rule matching the inner cause beats a built-in matching the outer error
    table.add_pattern("my backend broke", S.UCE)
    assert table.classify(_raise_from(RuntimeError(NCCL_ABORTED), RuntimeError("my backend broke"))).state == S.UCE
    table.user_rules.clear()
    assert table.classify(RuntimeError(GLOO_PEER_KILLED)).state == S.HCCL_FAILED


@pytest.mark.parametrize("text,state,error,message", [
    ("", S.UCE, ValueError, "non-empty string"),
    (None, S.UCE, ValueError, "non-empty string"),
    ("x", "BROKEN", ValueError, "unknown report state 'BROKEN'; known: NORMAL, RETRY"),
    ("x", 99, ValueError, "99 is not a valid ReportState"),
])
def test_bad_user_rules_are_clear_errors(text, state, error, message):
    with pytest.raises(error, match=message):
        FaultClassifier().add_pattern(text, state)
    with pytest.raises(TypeError, match="handle must be callable"):
        FaultClassifier().add_pattern("x", S.UCE, handle="nope")


def test_the_reference_face_shares_the_table():
    from mindio_adaptor.ttp import exception_handler as eh
    assert eh._user_patterns is faults.DEFAULT.user_rules
    assert eh.BUILTIN_PATTERNS == [(r.text, r.state) for r in BUILTIN_RULES]
    eh.tft_register_exception_handler("gloo went away", "UCE")
    try:
        assert faults.classify_exception(RuntimeError("gloo went away")).state == S.UCE
        assert eh.classify(RuntimeError(NCCL_WATCHDOG)) == (S.HCCL_FAILED, None)
    finally:
        faults.DEFAULT.user_rules.clear()


# ---------------------------------------------------------------- real gloo failures

def _gloo_worker(rank, mode, init_file, queue):
    # A generous timeout to connect (a loaded machine may take seconds), a short one for the fault.
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    tensor = torch.ones(4)
    dist.all_reduce(tensor)  # both alive: the connections exist before the fault
    dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=3))
    if rank == 1:
        if mode == "kill":
            os.kill(os.getpid(), 9)
        time.sleep(8)  # "sleep": stalled past the survivor's 3 s timeout
        os._exit(0)
    try:
        dist.all_reduce(tensor)
        queue.put(("no error", "", ""))
    except Exception as exc:
        queue.put((type(exc).__name__, str(exc), faults.classify_exception(exc).state.name))


# A killed peer shows as either text, depending on whether the survivor was reading when the socket died.
@pytest.mark.parametrize("mode,expected", [("kill", ("Connection closed by peer", "Connection reset by peer")),
                                           ("sleep", ("for recv operation to complete",))])
def test_real_gloo_errors_are_communication_failures(tmp_path, mode, expected):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_gloo_worker, args=(r, mode, str(tmp_path / "init"), queue)) for r in (0, 1)]
    for proc in procs:
        proc.start()
    try:
        type_name, message, state = queue.get(timeout=90)
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
    assert type_name == "RuntimeError" and any(text in message for text in expected), message
    assert state == "HCCL_FAILED"
