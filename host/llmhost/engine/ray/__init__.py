"""`backend = "ray"`: models served by Ray Serve deployments (docs/scale-out.md). Needs `pip install llmhost[ray]`."""
