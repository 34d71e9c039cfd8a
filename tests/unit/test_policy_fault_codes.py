"""faultCode.json parsing, unknown codes by reported severity, and severity order."""
import pytest

from mindio_adaptor.core.policy.config import fault_codes_from, read_fault_codes
from mindio_adaptor.core.policy.levels import CODE_LEVELS, Level, level_for_severity, most_severe
from mindio_adaptor.core.policy.rules import PolicyConfig, PolicyFileError


def parse(document):
    return fault_codes_from(document, "codes.json")


def test_severity_order_matches_the_reference():
    most_first = ["ManuallySeparateNPU", "SeparateNPU", "PreSeparateNPU", "RestartNPU", "FreeRestartNPU",
                  "RestartBusiness", "RestartRequest", "SubHealthFault", "NotHandleFault"]
    assert [level.name for level in sorted(Level, reverse=True)] == most_first


@pytest.mark.parametrize("levels, worst", [
    ([], Level.NotHandleFault),
    ([None, Level.RestartNPU, None], Level.RestartNPU),
    ([Level.PreSeparateNPU, Level.RestartNPU, Level.SubHealthFault], Level.PreSeparateNPU),
    ([Level.SeparateNPU, Level.ManuallySeparateNPU], Level.ManuallySeparateNPU),
])
def test_most_severe(levels, worst):
    assert most_severe(levels) is worst


@pytest.mark.parametrize("level", CODE_LEVELS)
def test_every_level_key_is_read(level):
    levels, issues = parse({f"{level.name}Codes": ["80E01801"]})
    assert levels == {"80E01801": level} and issues == []


def test_codes_are_normalised():
    levels, _ = parse({"SeparateNPUCodes": [" 80e01801 "]})
    assert levels == {"80E01801": Level.SeparateNPU}


ISSUE_CASES = [
    # document, effective levels, issue items
    ({"ManuallySeparateNPUCodes": ["80E01801"]}, {}, ["ManuallySeparateNPUCodes"]),
    ({"SeperateNPUCodes": ["80E01801"]}, {}, ["SeperateNPUCodes"]),
    ({"SeparateNPUCodes": ["80E01801", 42, ""]}, {"80E01801": Level.SeparateNPU},
     ["SeparateNPUCodes[1]", "SeparateNPUCodes[2]"]),
    ({"SeparateNPUCodes": ["80E01801", "80E01801"]}, {"80E01801": Level.SeparateNPU},
     ["SeparateNPUCodes[1]"]),
    ({"SeparateNPUCodes": ["80E01801"], "RestartNPUCodes": ["80E01801"]},
     {"80E01801": Level.SeparateNPU}, ["RestartNPUCodes[0]"]),
    ({"RestartNPUCodes": ["80E01801"], "SeparateNPUCodes": ["80E01801"]},
     {"80E01801": Level.SeparateNPU}, ["SeparateNPUCodes[0]"]),
]


@pytest.mark.parametrize("document, effective, issue_items", ISSUE_CASES)
def test_bad_items_are_ignored_and_named(document, effective, issue_items):
    levels, issues = parse(document)
    assert levels == effective
    assert [issue.item for issue in issues] == issue_items


def test_malformed_section_falls_back_to_the_shipped_list():
    levels, issues = parse({"RestartBusinessCodes": "80E01801", "SeparateNPUCodes": ["80E18005"]})
    assert levels == {"80E01801": Level.RestartBusiness, "80E18005": Level.SeparateNPU}
    assert [issue.item for issue in issues] == ["RestartBusinessCodes"]
    assert "default list" in issues[0].problem


@pytest.mark.parametrize("document", [[], "80E01801", None])
def test_top_level_must_be_an_object(document):
    with pytest.raises(PolicyFileError, match="codes.json"):
        parse(document)


SEVERITY_CASES = [
    ("hint", Level.NotHandleFault),
    ("minor", Level.NotHandleFault),
    (" Minor ", Level.NotHandleFault),
    ("HINT", Level.NotHandleFault),
    ("major", Level.SeparateNPU),
    ("critical", Level.SeparateNPU),
    ("", Level.SeparateNPU),
    (None, Level.SeparateNPU),
]


@pytest.mark.parametrize("severity, level", SEVERITY_CASES)
def test_unknown_code_is_handled_by_reported_severity(severity, level):
    assert level_for_severity(severity) is level
    config = PolicyConfig(levels={"80E01801": Level.RestartBusiness})
    assert config.level_of("DEADBEEF", severity) is level
    assert config.level_of("80E01801", severity) is Level.RestartBusiness


def test_shipped_fault_codes():
    levels, issues = read_fault_codes()
    assert issues == []
    assert levels["80E01801"] is Level.RestartBusiness
