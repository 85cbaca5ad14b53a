"""What ``gradsync report`` must draw (the issue's list), independent of the implementation's."""

EXPECTED_PLOTS = (
    "density.png",
    "error_norm.png",
    "eval_vs_time.png",
    "eval_vs_step.png",
    "throughput.png",
    "time_breakdown.png",
    "scaling.png",  # only when completed runs differ in worker count
)
