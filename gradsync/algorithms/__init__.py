"""Pure algorithm cores: numbers in, plans out, no process group (merge planning, knapsacks,
DeFT's queues and Preserver, cost models, OSP's split, k assignment, the simulator)."""
