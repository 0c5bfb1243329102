"""HTTP services of the environment core."""
