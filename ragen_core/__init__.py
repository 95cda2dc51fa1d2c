"""ragen_core."""
