"""The remote backend (`backend = "openai"`): models served by OpenAI-compatible servers."""
