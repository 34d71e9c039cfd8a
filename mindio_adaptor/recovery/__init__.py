"""The recovery machinery on a training process, apart from the patches that wrap Megatron's functions: the
session a recovery keeps (session), the flow table of strategy -> action -> stages (flows) and the stages
themselves (stages/), the parked wait for the controller's decision and what a rank does after it
(decision_wait, decision), the communicators' rebuilds (comm_rebuild), a replacement's way into the flow
(replacement_join), the resize's plans and state (scale_in, scale_out, resize_from_replicas, resized_layout),
a recovery's own checkpoints (staged_checkpoint), the replay of an interrupted step (step_replay), the record of
the job's model and optimizer (training_state), and the stages a reference-API client's handlers call
(client_actions). Megatron is reached only through the facade, mindio_adaptor/megatron."""
