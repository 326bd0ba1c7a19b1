"""A layer that takes a number the Telegram layer already has."""
