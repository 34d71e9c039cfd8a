"""What high availability runs on each step of the real Megatron job, held to a budget by counting (calls, frames
and bytes to the controller, the processor's locks), which a noisy machine does not disturb as it does timings.
Read from the uninterrupted dp4 reference run every rank's line at its end (core/steps/step_path_costs): no run of
its own. Timings of the parts are bench/replica_overhead.py's (docs/replicas.md)."""
from mindio_adaptor.core.steps.step_path_costs import LINE, parse_line

MICRO_BATCHES = 2  # global batch 16 of micro-batches of 2 over dp4
# calls per step on every rank; the reference checks the shard holders after every step (--verify-optimizer-replicas)
CALLS = {"update brackets": 2, "snapshot": 1, "step replay": 1, "signal start": 1, "signal check": 1,
         "fingerprints": 1, "progress": 2 * MICRO_BATCHES, "sections": 2, "loss lines": 3}
CALLS_ON_RANK0 = {**CALLS, "event watches": 1}
# Counted from the end of the first step to the process's end, the line also holds what falls outside the steps it
# counts: the first step's own end (its section, its holders' check, its loss line) and the end of training
# (waiting for the saves: a section).
AROUND_THE_STEPS = {"sections": 5, "fingerprints": 1, "signal check": 1, "loss lines": 1}
FRAMES_PER_STEP = 2  # tests/integration/test_processor_step_counts.py: a step's reports
# A step's section end and the next one's start wait up to 50 ms for the next frame; where none comes in time (a
# step longer than that, a loaded machine), the processor's network thread sends them, off the step's path.
DEFERRED_PER_STEP = 2
BYTES_PER_FRAME = 80
LOCKS_PER_STEP = 9
# The processor's network thread takes the lock about 20 times a second, idle or not (measured: 41 in 2 s): the
# budget grants it 30 a second of the steps' time and 1 s more for the end of training.
NETWORK_THREAD_LOCKS_PER_S = 30
FRAMES_AROUND = 6  # the sections around the steps, a heartbeat (every 2 s)


def _lines_per_rank(output):
    lines = {}
    for line in output.splitlines():
        if LINE.search(line):
            rank = int(line.split(" rank ", 1)[1].split("]", 1)[0])
            lines[rank] = parse_line(line)
    return lines


def test_every_rank_says_what_its_steps_ran_and_it_is_within_the_budget(reference_runs):
    run, _ = reference_runs("ha")
    lines = _lines_per_rank(run.output)
    assert sorted(lines) == [0, 1, 2, 3], run.output[-3000:]
    for rank, said in lines.items():
        steps = said["steps"]
        assert steps == 7, said  # 8 steps, counted from the end of the first
        budget = CALLS_ON_RANK0 if rank == 0 else CALLS
        calls = {part: round(per_step * steps) for part, (per_step, _) in said["parts"].items()}
        assert set(calls) == set(budget), (rank, said)
        for part, total in calls.items():
            assert budget[part] * steps <= total <= budget[part] * steps + AROUND_THE_STEPS.get(part, 0), \
                (rank, part, said)
        frames, deferred, sent, locks = (said["counters"][name] * steps for name in (
            "frames to the controller", "of them deferred", "bytes to the controller", "processor locks"))
        on_the_path = round(frames - deferred)
        assert FRAMES_PER_STEP * steps <= on_the_path <= FRAMES_PER_STEP * steps + FRAMES_AROUND, (rank, said)
        assert round(deferred) <= DEFERRED_PER_STEP * steps + 2, (rank, said)
        assert sent <= round(frames) * BYTES_PER_FRAME, (rank, said)
        seconds = sum(ms for step, ms in run.step_ms.items() if step > 1) / 1000 + 1
        assert locks <= LOCKS_PER_STEP * steps + 3 * FRAMES_AROUND + NETWORK_THREAD_LOCKS_PER_S * seconds, \
            (rank, said, seconds)
