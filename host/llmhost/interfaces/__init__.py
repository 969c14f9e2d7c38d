"""One module per WIT interface the host implements: its converters (WIT values <-> domain
types, on `runtime.abi`'s generic lowering), policy, engine calls."""
