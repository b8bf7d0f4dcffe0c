"""Where the time goes: the scheduler-side collector, the pure per-round breakdown, the
/ppt dashboard page and the standalone report."""
