"""Who holds which optimizer shard, and the plans that change it: scale-in, scale-out, dump world, reshard."""
