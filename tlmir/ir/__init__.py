"""Tensor expressions, operations, and the loop IR."""
