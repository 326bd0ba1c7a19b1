"""Work that reaches a chat from outside its queue: notification batches, results injected into a session, a job's run asking in a chat, the home source."""
