"""Kernels that misbehave on purpose: real ipykernel kernels, installed as kernelspecs."""
