"""What comes in from Telegram: polling, the update parsers, per-chat lanes, media and downloads."""
