"""Outbound HTTP: the allow-list and address checks, and the client (httpx) that sends what they allow."""
