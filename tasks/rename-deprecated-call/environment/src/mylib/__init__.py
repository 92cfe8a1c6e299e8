"""Shared helpers for the inventory tools."""
