"""What an update does: messages, commands, button taps, approvals, the /jobs and /memory panels, who may act."""
