"""How it goes out: the Bot API client and its errors, Telegram's delivery over the pipeline (bot/delivery), retries, send health."""
