"""A job's processes and the host and links they run on: how a worker learns who it is
(DistEnv), ports for rank 0's store, link rates, and whether this host can hold and start them."""
