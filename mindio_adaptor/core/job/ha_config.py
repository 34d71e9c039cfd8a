"""Which high-availability features a job asked for, and whether the request can work.

Built from the reference's command-line flags, overridden by the `HIGH_AVAILABILITY` environment
variable (a comma list of `dump`, `retry`, `recover`, `elastic-training`) exactly as the reference does.
Validation errors name the flag and the fix.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

ENV_OVERRIDE = "HIGH_AVAILABILITY"
ENV_WORDS = {
    "dump": "enable_high_availability",
    "retry": "enable_hbmfault_repair",
    "recover": "enable_worker_reboot",
    "elastic-training": "enable_elastic_training",
}

# Where a resize takes the job's state (--elastic-scale-in-from, --elastic-scale-out-from).
RESIZE_SOURCES = ("replicas", "checkpoint")

# Flags accepted now whose capability a later version of the adaptor brings.
NOT_YET_ACTIVE: dict = {}


class HighAvailabilityConfigError(ValueError):
    """A flag combination that cannot run; the message names the flag and the fix."""


@dataclass
class HighAvailabilityConfig:
    enable_high_availability: bool = False
    enable_hbmfault_repair: bool = False
    enable_worker_reboot: bool = False
    enable_elastic_training: bool = False
    distributed_optimizer_no_replica: bool = False
    elastic_scale_in_from: str = "replicas"
    elastic_scale_out_from: str = "replicas"
    optimizer_replica_num: int = 2
    verify_optimizer_replicas: bool = False
    sdc_check_interval: int = 20

    @property
    def replica_count(self) -> int:
        """Copies of every optimizer shard (1 when no replicas are wanted)."""
        if not self.enable_high_availability or self.distributed_optimizer_no_replica:
            return 1
        return self.optimizer_replica_num

    def apply_env_override(self, value: Optional[str]) -> "HighAvailabilityConfig":
        """The reference lets HIGH_AVAILABILITY replace the four feature flags."""
        if value is None or not value.strip():
            return self
        words = [w.strip() for w in value.split(",") if w.strip()]
        unknown = [w for w in words if w not in ENV_WORDS]
        if unknown:
            raise HighAvailabilityConfigError(
                f"{ENV_OVERRIDE}={value!r}: unknown word(s) {unknown}; use a comma list of "
                f"{', '.join(ENV_WORDS)}")
        for word, attribute in ENV_WORDS.items():
            setattr(self, attribute, word in words)
        # Every feature rests on the dump path and the replicated optimizer.
        if words:
            self.enable_high_availability = True
        return self

    def check_flags(self, use_distributed_optimizer: bool):
        """Checks that need no knowledge of the parallel layout."""
        if not isinstance(self.optimizer_replica_num, int) or self.optimizer_replica_num < 1:
            raise HighAvailabilityConfigError(
                f"--optimizer-replica-num must be an integer >= 1, got {self.optimizer_replica_num}")
        if not isinstance(self.sdc_check_interval, int) or self.sdc_check_interval < 0:
            raise HighAvailabilityConfigError(
                f"--sdc-check-interval must be an integer >= 0 (0: only at checkpoint steps), got "
                f"{self.sdc_check_interval}")
        needs_ha = [name for name in ("enable_hbmfault_repair", "enable_worker_reboot",
                                      "enable_elastic_training", "distributed_optimizer_no_replica",
                                      "verify_optimizer_replicas")
                    if getattr(self, name)]
        if needs_ha and not self.enable_high_availability:
            flag = "--" + needs_ha[0].replace("_", "-")
            raise HighAvailabilityConfigError(
                f"{flag} requires --enable-high-availability: add --enable-high-availability")
        for flag, source in (("--elastic-scale-in-from", self.elastic_scale_in_from),
                             ("--elastic-scale-out-from", self.elastic_scale_out_from)):
            if source not in RESIZE_SOURCES:
                raise HighAvailabilityConfigError(f"{flag} {source!r}: choose from {', '.join(RESIZE_SOURCES)}")
        if self.enable_elastic_training and not self.enable_worker_reboot:
            # The scale-in is what happens when a lost rank's replacement does not come in time.
            raise HighAvailabilityConfigError(
                "--enable-elastic-training (scale-in) requires --enable-worker-reboot: the job scales in when a "
                "lost rank's replacement does not arrive within MINDIO_ARF_WAIT_S; add --enable-worker-reboot")
        if self.enable_high_availability and not use_distributed_optimizer:
            raise HighAvailabilityConfigError(
                "--enable-high-availability requires --use-distributed-optimizer (the replicated "
                "ZeRO-1 optimizer): add --use-distributed-optimizer")

    def check_layout(self, data_parallel_size: int, context_parallel_size: int,
                     native_instances: int = 1):
        """Checks against the data-parallel size Megatron derived from the world size."""
        r = self.replica_count
        if not self.enable_high_availability:
            return
        dp_cp = data_parallel_size * context_parallel_size
        if r > 1 and dp_cp == 1:
            raise HighAvailabilityConfigError(
                f"--optimizer-replica-num {r} needs a data-parallel size > 1, but DP x CP = 1: use "
                f"more ranks, or --distributed-optimizer-no-replica for no replicas")
        if dp_cp % r:
            raise HighAvailabilityConfigError(
                f"--optimizer-replica-num {r} must divide DP x CP = {data_parallel_size} x "
                f"{context_parallel_size} = {dp_cp}: choose R from {divisors(dp_cp)}")
        if native_instances not in (1, r):
            raise HighAvailabilityConfigError(
                f"--num-distributed-optimizer-instances {native_instances} conflicts with "
                f"--optimizer-replica-num {r}: with --enable-high-availability drop "
                f"--num-distributed-optimizer-instances (the adaptor sets it to R)")

    def check_elastic(self, tensor: int, pipeline: int, context: int, expert: int):
        """The scale-in drops whole data-parallel slices (every TP x PP rank of each) of a job without context
        parallelism so far (docs/elastic.md): refused at the start rather than at the first lost rank. Expert
        parallelism is carried where the smaller size can hold it (recovery/scale_in)."""
        if not self.enable_elastic_training:
            return
        del tensor, pipeline, expert  # carried: a lost slice leaves with all its TP x PP ranks; experts stay put
        sizes = {"--context-parallel-size": context}
        other = [f"{flag} {size}" for flag, size in sizes.items() if size != 1]
        if other:
            raise HighAvailabilityConfigError(
                f"--enable-elastic-training supports data, tensor, pipeline and expert parallelism alone so far, "
                f"but this job has {', '.join(other)}: drop --enable-elastic-training (a lost rank is then replaced "
                f"or dumped)")

    def inactive_requests(self) -> List[str]:
        return [text for name, text in NOT_YET_ACTIVE.items() if getattr(self, name)]


def divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
