"""``chathub setup``: the first-run wizard (``wizard.py``), its questions (``terminal.py``)
and the ``.env`` it writes (``envfile.py``)."""
