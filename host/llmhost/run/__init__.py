"""What one guest run or request owns (`scope`) and the model service every caller goes through (`service`).
No wasmtime here."""
