"""The stages of a recovery, one per file: each a `Stage` (stage.py) run by recovery/flows, which
alone knows which stages make up each action of each flow, and in which order."""
