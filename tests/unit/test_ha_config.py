import pytest

from mindio_adaptor.core.job.ha_config import HighAvailabilityConfig, HighAvailabilityConfigError


def test_replica_count_follows_flags():
    assert HighAvailabilityConfig().replica_count == 1
    assert HighAvailabilityConfig(enable_high_availability=True).replica_count == 2
    assert HighAvailabilityConfig(enable_high_availability=True, optimizer_replica_num=4).replica_count == 4
    assert HighAvailabilityConfig(enable_high_availability=True,
                                  distributed_optimizer_no_replica=True).replica_count == 1


@pytest.mark.parametrize("env, expected", [
    ("dump", dict(enable_high_availability=True, enable_hbmfault_repair=False)),
    ("dump,retry", dict(enable_high_availability=True, enable_hbmfault_repair=True)),
    ("retry, recover", dict(enable_high_availability=True, enable_worker_reboot=True,
                            enable_hbmfault_repair=True)),
    ("elastic-training", dict(enable_elastic_training=True, enable_hbmfault_repair=False)),
])
def test_env_override_replaces_feature_flags(env, expected):
    config = HighAvailabilityConfig(enable_hbmfault_repair=True).apply_env_override(env)
    for name, value in expected.items():
        assert getattr(config, name) == value, name


def test_env_override_rejects_unknown_words():
    with pytest.raises(HighAvailabilityConfigError, match="HIGH_AVAILABILITY.*'retri'"):
        HighAvailabilityConfig().apply_env_override("dump,retri")


def test_empty_env_changes_nothing():
    config = HighAvailabilityConfig(enable_high_availability=True).apply_env_override(" ")
    assert config.enable_high_availability


@pytest.mark.parametrize("config, dist_opt, message", [
    (HighAvailabilityConfig(enable_high_availability=True), False, "--use-distributed-optimizer"),
    (HighAvailabilityConfig(enable_hbmfault_repair=True), True,
     "--enable-hbmfault-repair requires --enable-high-availability"),
    (HighAvailabilityConfig(enable_worker_reboot=True), True,
     "--enable-worker-reboot requires --enable-high-availability"),
    (HighAvailabilityConfig(enable_high_availability=True, optimizer_replica_num=0), True,
     "--optimizer-replica-num must be an integer >= 1"),
])
def test_flag_errors_name_flag_and_fix(config, dist_opt, message):
    with pytest.raises(HighAvailabilityConfigError, match=message):
        config.check_flags(dist_opt)


@pytest.mark.parametrize("r, dp, cp, instances, message", [
    (3, 4, 1, 1, r"must divide DP x CP = 4 x 1 = 4: choose R from \[1, 2, 4\]"),
    (2, 1, 1, 1, "needs a data-parallel size > 1"),
    (2, 4, 1, 4, "--num-distributed-optimizer-instances 4 conflicts"),
])
def test_layout_errors(r, dp, cp, instances, message):
    config = HighAvailabilityConfig(enable_high_availability=True, optimizer_replica_num=r)
    with pytest.raises(HighAvailabilityConfigError, match=message):
        config.check_layout(dp, cp, instances)


def test_valid_layouts_pass():
    HighAvailabilityConfig(enable_high_availability=True).check_layout(2, 2, 1)
    HighAvailabilityConfig(enable_high_availability=True, optimizer_replica_num=4).check_layout(4, 1, 4)
    HighAvailabilityConfig(enable_high_availability=True,
                           distributed_optimizer_no_replica=True).check_layout(1, 1, 1)
    HighAvailabilityConfig().check_layout(1, 1, 1)


def test_elastic_training_is_active_and_needs_worker_reboot():
    config = HighAvailabilityConfig(enable_high_availability=True, enable_worker_reboot=True,
                                    enable_elastic_training=True)
    config.check_flags(use_distributed_optimizer=True)
    assert config.inactive_requests() == []
    alone = HighAvailabilityConfig(enable_high_availability=True, enable_elastic_training=True)
    with pytest.raises(HighAvailabilityConfigError, match="--enable-elastic-training .* requires --enable-worker-reboot"):
        alone.check_flags(use_distributed_optimizer=True)


def test_elastic_training_with_context_parallelism_is_refused_at_the_start():
    config = HighAvailabilityConfig(enable_high_availability=True, enable_worker_reboot=True,
                                    enable_elastic_training=True)
    config.check_elastic(1, 1, 1, 1)
    config.check_elastic(2, 2, 1, 1)  # tensor and pipeline parallelism are carried
    config.check_elastic(1, 1, 1, 2)  # expert parallelism too, where the smaller size holds it (recovery/scale_in)
    with pytest.raises(HighAvailabilityConfigError, match=r"data, tensor, pipeline and expert parallelism alone so "
                                                          r"far, but this job has --context-parallel-size 2: drop"):
        config.check_elastic(2, 2, 2, 1)
    HighAvailabilityConfig(enable_high_availability=True).check_elastic(2, 2, 2, 2)  # not asked for: no check


def test_each_resize_source_is_one_of_two():
    HighAvailabilityConfig(elastic_scale_in_from="checkpoint", elastic_scale_out_from="checkpoint").check_flags(True)
    with pytest.raises(HighAvailabilityConfigError, match=r"--elastic-scale-out-from 'disk': choose from replicas, "
                                                          r"checkpoint"):
        HighAvailabilityConfig(elastic_scale_out_from="disk").check_flags(True)
    with pytest.raises(HighAvailabilityConfigError, match=r"--elastic-scale-in-from 'memory': choose from replicas, "
                                                          r"checkpoint"):
        HighAvailabilityConfig(elastic_scale_in_from="memory").check_flags(True)
