"""What a fault is and how it shows: the fault table, injection, the hang rule, repeat offenders, exit codes."""
