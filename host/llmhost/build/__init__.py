"""Guest building: sources and world detection (`world`), componentize-py (`compile`), and the templates of
`llmhost new` (`templates`). Stands apart from the runtime."""
