"""Pipelined schedulers: groups exchanged during backward (wfbp, lags, mgs, omgs)."""
