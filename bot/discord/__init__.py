"""Discord: the agent in DMs, guild channels and threads, through discord.py (docs/discord.md)."""
