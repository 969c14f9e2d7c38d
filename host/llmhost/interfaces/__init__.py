"""One module per WIT interface the host implements: argument conversion (`abi`), policy, engine calls."""
