"""The Inspect entry point (``[project.entry-points.inspect_ai]`` in pyproject.toml): importing this
registers the tasks, so that ``inspect eval a01_repair_gym/<task>`` finds them, and lets Inspect
estimate tokens without network access (the package does, on import: :mod:`a01_repair_gym._offline`)."""

# ruff: noqa: F401
from a01_repair_gym._task import external, private, test, test_styles
