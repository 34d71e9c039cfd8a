"""Framework-agnostic mechanisms. Nothing in this package imports megatron."""
