"""The HTTP app: the Telegram webhook now; the JSON API and the web inbox later."""
