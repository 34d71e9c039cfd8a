"""A step as a recovery sees it: its data replayed, its loss line, each recovery's timeline, hook points."""
