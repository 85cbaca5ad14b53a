"""Option values the scheduler schemas check without importing the schedulers (and torch)."""

OMGS_RULE_NAMES = ("paper", "code", "safe", "optimal")
MGS_THRESHOLD = 8192  # elements; the default of the OMGS authors' scripts (horovod_mpi.sh)
