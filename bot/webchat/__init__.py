"""The web chat: a browser (or an API client) talks to the agent over a WebSocket.

The platform layer's second client, beside Telegram: commands, card semantics and failure
sentences come from ``bot.platform``. ``protocol.py`` holds the frames, ``translate.py``
turns hub events into frames, ``auth.py`` checks a socket before it is accepted,
``transport.py`` is the endpoint, ``actions.py`` what a client frame does, ``uploads.py``
a message's files. See docs/webchat.md.
"""
