"""faultCode.json: which level each fault code has.

Shape (the reference's): {"NotHandleFaultCodes": ["80E21007", ...], "RestartBusinessCodes": [...], ...},
one list of hex code strings per level, the key being the level's name followed by "Codes".
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

from mindio_adaptor.core.policy.levels import CODE_LEVELS, Level, parse_level
from mindio_adaptor.core.policy.rules import ConfigIssue, PolicyFileError, json_kind, normalize_code

LEVEL_KEYS = {f"{level.name}Codes": level for level in CODE_LEVELS}


def parse_fault_codes(document: object, source: str,
                      default_sections: Mapping[str, Sequence[str]]
                      ) -> Tuple[Dict[str, Level], List[ConfigIssue]]:
    """The level of every listed code, and the items that were ignored.

    A section that is not a list falls back to the same section of `default_sections` (the shipped
    file). A code listed under two levels gets the more severe one: a demanding operator would rather
    over-react to a contradiction in the file than silently under-react."""
    if not isinstance(document, dict):
        raise PolicyFileError(source, f"expected a JSON object of level lists, got {json_kind(document)}")
    levels: Dict[str, Level] = {}
    issues: List[ConfigIssue] = []
    for key, section in document.items():
        level = LEVEL_KEYS.get(key)
        if level is None:
            issues.append(ConfigIssue(source, key, _unknown_key_problem(key)))
            continue
        if not isinstance(section, list):
            fallback = list(default_sections.get(key, ()))
            issues.append(ConfigIssue(source, key, f"expected a list of code strings, got "
                                      f"{json_kind(section)}; using the default list "
                                      f"({len(fallback)} codes)"))
            section = fallback
        _add_codes(levels, issues, source, key, level, section)
    return levels, issues


def _add_codes(levels: Dict[str, Level], issues: List[ConfigIssue], source: str, key: str,
               level: Level, section: Sequence[object]) -> None:
    for index, raw in enumerate(section):
        item = f"{key}[{index}]"
        if not isinstance(raw, str) or not raw.strip():
            issues.append(ConfigIssue(source, item, f"expected a code string, got {raw!r}; ignored"))
            continue
        code = normalize_code(raw)
        earlier = levels.get(code)
        if earlier is None:
            levels[code] = level
        elif earlier == level:
            issues.append(ConfigIssue(source, item, f"{code} is listed twice under {key}; ignored"))
        else:
            levels[code] = max(earlier, level)
            issues.append(ConfigIssue(source, item, f"{code} is also listed under {earlier.name}Codes; "
                                      f"the more severe {levels[code].name} applies"))


def _unknown_key_problem(key: str) -> str:
    if key.endswith("Codes") and parse_level(key[:-len("Codes")]) is Level.ManuallySeparateNPU:
        return ("ManuallySeparateNPU is only reached by a FaultFrequency rule, not a fault's own "
                "level; section ignored")
    return f"unknown key (expected one of {', '.join(LEVEL_KEYS)}); section ignored"
