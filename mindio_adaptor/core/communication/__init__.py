"""Communicators that survive a membership change, and moving optimizer state between ranks."""
