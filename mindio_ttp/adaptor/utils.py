"""The reference adaptor's `mindio_ttp.adaptor.utils`: where the client's handlers find things in the
train arguments (args[TRAIN_PARAM] is the list handed to Megatron's train(), in its order)."""
TRAIN_PARAM = 0  # the decorated tft_train(train_args, test_data_iterator_list): train_args is first
FORWARD_STEP_FUNC_INDEX = 0
MODEL_INDEX = 1
OPTIM_INDEX = 2
SCHEDULER_INDEX = 3
TRAIN_DATA_INDEX = 4
VALID_DATA_INDEX = 5
PROCESS_NON_LOSS_DATA_FUNC_INDEX = 6
CONFIG_INDEX = -1
