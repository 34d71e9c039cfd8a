"""Dying-gasp checkpoint directories: where one is written, read back, and made the resume point."""
