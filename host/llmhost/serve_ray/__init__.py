"""An app config served by Ray Serve (`llmhost.ray:app`, `llmhost serve --ray`): ingress replicas running
`llmhost serve`'s own ASGI app, spread across the cluster's nodes, behind Ray's HTTP proxy. Models with
`backend = "ray"` are reached through their own deployments (engine/ray); key-value state shared by several
replicas lives in Redis."""
