"""A job's processes and the machines and links they run on: how a worker learns who it is
(DistEnv), which GPU it takes and which backend its groups use, ports for rank 0's store, link
rates, and whether a host can hold and start them. (Named for the cluster, not ``dist``, which
tools and people read as a build output.)"""
