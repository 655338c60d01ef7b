"""Where code runs: local Jupyter kernels or a remote kernels API."""
