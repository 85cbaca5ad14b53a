"""Option values the scheduler schemas check without importing the schedulers (and torch)."""

OMGS_RULE_NAMES = ("paper", "code", "safe", "optimal")
MGS_THRESHOLD = 8192  # elements; the default of the OMGS authors' scripts (horovod_mpi.sh)
UMAX_FORMULAS = ("paper", "corrected")  # OSP's U_max: as printed, or with losses slowing it
DEFT_PROFILE_FIELDS = ("bounds", "forward", "backward", "comm", "mu")  # deft.BucketProfile's
