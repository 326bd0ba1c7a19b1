"""A turn's context: the frame's transcript, the messages and prompts sent, compaction, frames and their environments, tool sets, the scratchpad."""
