"""Predicting iteration time from a profile of the model and a description of the cluster:
what ``gradsync simulate`` computes for every compressor × scheduler, and how the reproductions
check those predictions against their measured netem runs."""
