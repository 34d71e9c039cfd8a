"""The environment of a run with planned faults (MINDIO_FAULT_INJECT), each fired once per job: the state
of what already fired is kept under `directory`."""


def fault_env(spec: str, directory) -> dict:
    return {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": str(directory / "faults")}
