"""The shell `llmhost serve` and `llmhost mcp` share around their guests: the app config (`config`, `auth`,
`sources`), the HTTP front (`front`, `protocol`: uvicorn, limits, the request-head timeout), the probes and metrics
(`probes`, `metrics`), `--watch` (`watch`), a guest's failures and output (`guest`), and how a server starts its host
(`hosting`). `serve/` adds the `http-app` world's component and ASGI app; `mcp/` the MCP tools."""
