"""Reading faultCode.json and faultCustomization.json from disk, with the shipped files as defaults.

`read_policy` returns the effective rules and every ignored item; `load_policy` does the same and
logs each ignored item once (what a long-running controller wants). A file that cannot be used at
all raises `PolicyFileError` instead of quietly falling back: an operator who passed a file expects
it to be used, and a silent fallback to defaults would hide a broken deployment.
"""
from __future__ import annotations

import functools
import json
import logging
import os
from importlib import resources
from typing import List, Optional, Tuple

from mindio_adaptor.core.policy.customization import parse_customization
from mindio_adaptor.core.policy.fault_codes import parse_fault_codes
from mindio_adaptor.core.policy.rules import ConfigIssue, Customization, PolicyConfig, PolicyFileError

logger = logging.getLogger(__name__)

FAULT_CODE_FILE = "faultCode.json"
CUSTOMIZATION_FILE = "faultCustomization.json"
# Both files are a few kilobytes; anything far larger is the wrong file and is refused before parsing.
MAX_FILE_BYTES = 16 * 1024 * 1024


def default_path(name: str) -> str:
    """Where the shipped copy of `name` (FAULT_CODE_FILE or CUSTOMIZATION_FILE) lives."""
    return str(resources.files("mindio_adaptor").joinpath("data", name))


def read_json(path: str) -> object:
    """The parsed JSON document at `path`; PolicyFileError names the file and the problem."""
    if not os.path.exists(path):
        raise PolicyFileError(path, "no such file")
    # A FIFO or device would block or never end; only regular files are read.
    if not os.path.isfile(path):
        raise PolicyFileError(path, "not a regular file")
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise PolicyFileError(path, f"larger than {MAX_FILE_BYTES} bytes; not a policy file")
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode("utf-8"))
    except OSError as error:
        raise PolicyFileError(path, f"cannot be read ({error.strerror})") from None
    except UnicodeDecodeError:
        raise PolicyFileError(path, "not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise PolicyFileError(path, f"not valid JSON: {error.msg} at line {error.lineno} "
                              f"column {error.colno}") from None
    except RecursionError:  # a policy file is a few levels deep; thousands are no policy
        raise PolicyFileError(path, "nested too deeply to be a policy file") from None


@functools.lru_cache(maxsize=None)
def _default_document(name: str) -> object:
    return read_json(default_path(name))


def fault_codes_from(document: object, source: str):
    """The levels and ignored items of a parsed faultCode.json document."""
    return parse_fault_codes(document, source, _default_document(FAULT_CODE_FILE))


def customization_from(document: object, source: str):
    """The rules and ignored items of a parsed faultCustomization.json document."""
    return parse_customization(document, source, _default_document(CUSTOMIZATION_FILE))


def read_fault_codes(path: Optional[str] = None) -> Tuple[dict, List[ConfigIssue]]:
    path = path or default_path(FAULT_CODE_FILE)
    return fault_codes_from(read_json(path), path)


def read_customization(path: Optional[str] = None) -> Tuple[Customization, List[ConfigIssue]]:
    path = path or default_path(CUSTOMIZATION_FILE)
    return customization_from(read_json(path), path)


def read_policy(fault_code_path: Optional[str] = None,
                customization_path: Optional[str] = None) -> PolicyConfig:
    """The effective policy; None for a path means the shipped file."""
    levels, code_issues = read_fault_codes(fault_code_path)
    customization, custom_issues = read_customization(customization_path)
    sources = (fault_code_path or default_path(FAULT_CODE_FILE),
               customization_path or default_path(CUSTOMIZATION_FILE))
    return PolicyConfig(levels, customization, tuple(code_issues + custom_issues), sources)


def load_policy(fault_code_path: Optional[str] = None,
                customization_path: Optional[str] = None) -> PolicyConfig:
    """`read_policy`, logging each ignored item once."""
    config = read_policy(fault_code_path, customization_path)
    for issue in config.issues:
        logger.warning("fault policy: %s", issue)
    logger.info("fault policy: %d fault codes, %d frequency rules, %d duration rules from %s",
                len(config.levels), len(config.customization.frequency),
                len(config.customization.duration), ", ".join(config.sources))
    return config


def empty_policy() -> PolicyConfig:
    """No codes and no rules: every fault is handled by its reported severity alone."""
    return PolicyConfig({}, Customization(), (), ())

