"""forestpy."""
