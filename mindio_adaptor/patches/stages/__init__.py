"""The stages of a recovery, one per file: each a `Stage` (stage.py) run by patches/recovery, which
alone knows which stages make up each action of each flow, and in which order."""
