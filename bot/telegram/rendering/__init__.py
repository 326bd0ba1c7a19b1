"""What a chat is shown: the answer's text and entities, approval cards, the progress line and typing, the hub's events rendered."""
