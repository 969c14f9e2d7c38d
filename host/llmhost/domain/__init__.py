"""The vocabulary of the whole host: errors, limits and the value types that validate themselves."""
