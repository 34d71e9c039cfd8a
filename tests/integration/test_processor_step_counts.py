"""What one training step's reports cost the processor, counted, not timed: frames and bytes sent to a real
controller over a real socket, and the processor's locks taken. A step reports its section's start and end and its
update's start and end; the section's changes ride on the next frame (the update's start), so a step sends two
frames. A change that sends more per step, or bigger frames, or takes more locks, fails here (docs/replicas.md:
what high availability costs per step)."""
import os
import time

from controller_harness import end_in_process_job, in_process_job, wait_until

from mindio_adaptor.ttp import controller as ctl

FRAMES_PER_STEP = 2  # the update's start (with the last step's section end and this one's start), its end
BYTES_PER_FRAME = 80  # a status frame: header and the rank's status, whatever the step number
LOCKS_PER_STEP = 9  # each report takes the state lock; a frame sent, the status frame's and the sender's too


def _one_step(processor, step):
    processor.begin_section("step", 30.0)
    processor.add_progress(1)
    processor.start_updating(step - 1)
    processor.end_updating(step)
    processor.end_section()


def test_a_step_sends_four_small_frames_and_takes_a_bounded_number_of_locks():
    processors = in_process_job(2)
    try:
        rank0 = processors[0]
        _one_step(rank0, 1)  # the first step's frames carry nothing the later ones do not
        before = rank0.stats()
        for step in range(2, 12):
            _one_step(rank0, step)
        after = rank0.stats()
        wait_until(lambda: ctl.controller_ranks()[0]["step"] == 11, 5, "the controller saw step 11")
    finally:
        end_in_process_job(processors)
    frames = (after["frames_sent"] - before["frames_sent"]) / 10
    sent = (after["bytes_sent"] - before["bytes_sent"]) / 10
    locks = (after["locks_taken"] - before["locks_taken"]) / 10
    # a heartbeat may fall in the ten steps (every 2 s): at most one more frame in all
    assert FRAMES_PER_STEP <= frames <= FRAMES_PER_STEP + 0.1, after
    assert sent <= (FRAMES_PER_STEP + 0.1) * BYTES_PER_FRAME, after
    # the network thread's own, in the same while; a heartbeat in the ten steps takes its own too (seen under CI's
    # load: 10.1 a step)
    assert locks <= LOCKS_PER_STEP + 1.2, after


def test_a_sections_start_alone_reaches_the_controller_within_a_tenth_of_a_second():
    """The hang rule must learn of a section even when no other frame follows (a long forward): the network thread
    sends a deferred change after 50 ms."""
    processors = in_process_job(1)
    try:
        rank0 = processors[0]
        before = rank0.stats()["frames_sent"]
        started = time.monotonic()
        rank0.begin_section("step", 30.0)
        sent = wait_until(lambda: rank0.stats()["frames_sent"] > before and time.monotonic(), 5, "the deferred status")
        assert sent - started < 0.5  # 50 ms, and a loaded machine's scheduling
        assert rank0.stats()["frames_sent"] == before + 1
    finally:
        end_in_process_job(processors)


def test_a_save_sections_start_and_end_are_sent_at_once():
    """The controller judges a fault by where the faulted rank was: a rank killed 10 ms into a save must be known
    to have been in it (the others' save has nothing left to wait for)."""
    processors = in_process_job(2)
    try:
        rank0 = processors[0]
        before = rank0.stats()["frames_sent"]
        rank0.begin_section("save", 600.0)
        assert rank0.stats()["frames_sent"] == before + 1
        rank0.end_section()
        assert rank0.stats()["frames_sent"] == before + 2
    finally:
        end_in_process_job(processors)


def _thread_names() -> set:
    names = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.add(comm.read().strip())
        except OSError:
            continue  # the thread ended
    return names


def test_the_native_threads_carry_their_names():
    """The step path's line reports the CPU of the threads named mindio-* (core/steps/step_path_costs). A thread
    names itself when it starts, which may come after its processor's start returned."""
    processors = in_process_job(2)
    wanted = {"mindio-ctl", "mindio-ctl-net", "mindio-proc-net", "mindio-proc-act"}
    try:
        wait_until(lambda: wanted <= _thread_names(), 5, f"threads named {sorted(wanted)}")
    finally:
        end_in_process_job(processors)
