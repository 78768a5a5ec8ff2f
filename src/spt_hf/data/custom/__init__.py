"""The generic task, ``task: custom``: a user's own data described by ``task_options`` (docs/own-data.md).

``raw`` holds what a reader returns, ``sources`` finds and reads the one source the options name.
"""
