def shout(text):
    import string

    return string.capwords(text).upper() + "!"
