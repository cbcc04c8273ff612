"""isa package."""
