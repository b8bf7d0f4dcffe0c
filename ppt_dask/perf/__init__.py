"""The run-time model of seed 001: prediction (numpy only), fitting, planning, and the
calibration that measures its constants on a cluster."""
