"""A layer whose one migration fails halfway."""
