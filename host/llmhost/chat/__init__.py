"""Chat on top of the engine protocol: the model's own template, tool calls, and the chat results."""
