"""Replay speed of the fault-policy engine: a generated 100k-event log through the shipped rules.

    python bench/policy_engine.py [--events N] [--devices D] [--seed S]

Prints events/s by wall and by CPU time (best of three replays, each on a fresh engine). A benchmark,
not a test: nothing is asserted about time. The log mixes the shipped rules' codes (the 41-code
ManuallySeparateNPU rule, 80E18005, the 81078603 link fault with its duration rule) with unknown
codes and operator clears.
"""
from __future__ import annotations

import argparse
import random
import time

from mindio_adaptor.core.policy import FaultEvent, PolicyEngine, read_policy

LINK = "81078603"


def generate(count: int, devices: int, seed: int, frequency_codes) -> list:
    rng = random.Random(seed)
    codes = list(frequency_codes) + ["80E18005", "80E01801", "DEAD0001"]
    events, clock = [], 0.0
    while len(events) < count:
        clock += rng.expovariate(1.0)
        device = rng.randrange(devices)
        roll = rng.random()
        if roll < 0.001:
            events.append(FaultEvent(clock, device, "clear"))
            continue
        code = LINK if roll < 0.3 else rng.choice(codes)
        severity = rng.choice(("minor", "major")) if code == "DEAD0001" else None
        events.append(FaultEvent(clock, device, "occur", code, severity))
        events.append(FaultEvent(clock + rng.choice((3.0, 25.0)), device, "recover", code))
    events.sort(key=lambda event: event.time)
    return events[:count]


def replay(config, events) -> tuple:
    engine = PolicyEngine(config)
    wall, cpu = time.perf_counter(), time.process_time()
    decisions = sum(len(engine.handle(event)) for event in events)
    return time.perf_counter() - wall, time.process_time() - cpu, decisions, engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    config = read_policy()
    events = generate(args.events, args.devices, args.seed, config.customization.frequency)
    runs = [replay(config, events) for _ in range(3)]
    elapsed, cpu, decisions, engine = min(runs, key=lambda run: run[0])
    # CPU time too: on a shared machine the wall time measures the neighbours as much as the engine.
    print(f"policy engine: {len(events)} events ({decisions} decisions, {args.devices} devices, "
          f"{len(engine.isolated_devices())} isolated at the end) in {elapsed:.3f} s wall, "
          f"{cpu:.3f} s CPU: {len(events) / elapsed:,.0f} events/s ({len(events) / cpu:,.0f} per CPU second)")


if __name__ == "__main__":
    main()
