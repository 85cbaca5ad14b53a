"""How a worker learns who it is (DistEnv) and joins its process group."""
