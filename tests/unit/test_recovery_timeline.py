from mindio_adaptor.core.steps.recovery_timeline import Timeline


def test_one_line_per_recovery_with_its_marks_in_order():
    timeline = Timeline()
    timeline.begin(5, "UCE fault")
    timeline.begin(5, "stopped by the controller")  # a repeat while it runs is the same recovery
    timeline.mark("stopped")
    timeline.mark("shard received", "1024 bytes from rank 3 in 0.01 s")
    recovery = timeline.end("first step done")
    line = recovery.line(1)
    assert line.startswith("recovery 1 on rank 1, step 5, UCE fault: detected +0.00 s, stopped +")
    assert "shard received +" in line and "(1024 bytes from rank 3 in 0.01 s)" in line
    assert line.endswith("first step done")
    assert [event for event, _, _ in recovery.marks] == ["detected", "stopped", "shard received",
                                                           "first step done"]
    assert timeline.current is None


def test_marks_outside_a_recovery_are_ignored_and_the_summary_lists_every_recovery():
    timeline = Timeline()
    timeline.mark("stopped")
    assert timeline.end("nothing") is None
    assert timeline.summary(0) == "rank 0: no recovery in this run"
    timeline.begin(3, "a")
    timeline.end("first step done")
    timeline.begin(7, "b")
    timeline.end("job ended by the controller (dump at step 6)")
    summary = timeline.summary(2).splitlines()
    assert summary[0] == "rank 2: 2 recovery(ies) in this run"
    assert summary[1].startswith("  recovery 1 on rank 2, step 3, a:")
    assert summary[2].startswith("  recovery 2 on rank 2, step 7, b:") and summary[2].endswith("(dump at step 6)")
