"""The check every bad-input table of this folder makes on a refusal."""


def assert_refusal(error, kind, fragments):
    """``error`` (the raised exception) is exactly ``kind``, its message says ``Received:`` and
    holds every fragment; returns the message."""
    message = str(error)
    assert type(error) is kind, message
    assert 'Received:' in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message
