"""A local package a test guest depends on by path (tests/guests/deps_probe)."""


def shout(text):
    return text.upper() + "!"
