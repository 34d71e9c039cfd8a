"""The one door to the running Megatron job: every read and write of Megatron's state outside the patches
whose job is its internals goes through a function here (arguments, iteration, timers, rerun state,
parallel state, optimizer shard, model params, RNG, data position, checkpoint load and save, the model built
again and the sizes at a resize, the uneven split's calculator, where its release's files lie).

The recovery stages (recovery/stages) take this package as a parameter; their unit tests pass an object with
the same functions instead. Megatron is imported inside the functions: importing this package does not
import Megatron. One module per area; the names below are the facade.

The door sits below recovery/ and patches/: it imports neither (only core/), so both may import it
(tests/unit/test_import_graph.py holds the layers).
"""
from mindio_adaptor.megatron.args import (args, args_if_parsed, current_iteration, evaluation_samples, rerun_mode,
                                          reset_rerun_state, restore_rng, rng_states, set_data_position,
                                          set_iteration_state, set_parallel_sizes, set_rank, set_rerun_mode,
                                          set_valid_position, valid_position)
from mindio_adaptor.megatron.checkpoint import (KEY_RERUN, MegatronStateError, abort_async_checkpoint_writer,
                                                load_checkpoint_of_step, save_checkpoint_for_full_job,
                                                unfinalized_async_saves)
from mindio_adaptor.megatron.checkpoint_queue import discard_stale_write_results
from mindio_adaptor.megatron.data import (build_datasets, iterator_at_sample, position_test_iterators,
                                          position_train_iterators, position_valid_iterators,
                                          snapshot_of_completed_step)
from mindio_adaptor.megatron.losses import (detached_losses, gather_objects, is_last_rank, log_step_line,
                                            prints_loss_line, reduce_step_losses)
from mindio_adaptor.megatron.optimizer import (LAZY_CACHES, STATE_KINDS, distributed_optimizers, drop_gradients,
                                               install_optimizer_common_state, install_step_state,
                                               materialize_optimizer_state, optimizer_common_state,
                                               optimizer_state_slots, optimizes_experts, rederive_model_params,
                                               shard_state_tensors, shard_tensors, shard_tensors_by_optimizer,
                                               step_state)
from mindio_adaptor.megatron.parallel import (data_parallel_group, gloo_groups_wanted,
                                              point_optimizer_at_single_instance, process_groups,
                                              reinitialize_parallel_state, replica_peers_group,
                                              single_instance_init_call, state_group, world_size)
from mindio_adaptor.megatron.rebuild import rebuild, setup_model_and_optimizer_again, take_place_of, with_current_groups
from mindio_adaptor.megatron.sizes import (apply_original_sizes, apply_scale_in_sizes, microbatch_calculator,
                                           take_original_rank)
from mindio_adaptor.megatron.timers import interval_reading, interval_seconds, running_timers, set_running_timers
from mindio_adaptor.megatron.uneven import active as uneven_share, count_samples, weigh_loss, whole_batch_as_one_rank
