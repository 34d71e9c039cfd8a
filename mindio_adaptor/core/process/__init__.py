"""A training process's own machinery: its children and forks, the CPU device layer, logs, settings, files."""
