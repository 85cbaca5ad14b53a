"""``scheduler=deft``: DeFT's delayed, knapsack-scheduled communication."""
