"""What each train_step notes so that it can be computed again after an online repair: the timers
already running when it began, and its data iterator wrapped to give the step's micro-batches again
(core/steps/replay_iterator). Megatron hands train_step a RerunDataIterator (it asserts so); its source
(`.iterable`) is wrapped once in a ReplayableIterator, and the RerunDataIterator itself is passed on."""
from mindio_adaptor.core.steps.replay_iterator import ReplayableIterator


def prepare_step(session, megatron, data_iterator, step: int):
    """At each train_step: note the timers already running, and return the iterator to use."""
    session.replay.timers_running_before_step = megatron.running_timers()
    return replayable(session, data_iterator, step)


def replayable(session, data_iterator, step: int):
    if data_iterator is None:
        return None
    if isinstance(data_iterator, list):
        return [replayable(session, it, step) for it in data_iterator]
    iterators = session.replay.iterators
    wrapper = iterators.get(id(data_iterator))
    if wrapper is None:
        holder = data_iterator if hasattr(data_iterator, "iterable") else None
        if holder is None:
            return data_iterator  # not Megatron's iterator: nothing to replay through
        wrapper = iterators[id(data_iterator)] = holder.iterable = ReplayableIterator(holder.iterable)
    wrapper.begin_step(step)
    return data_iterator
