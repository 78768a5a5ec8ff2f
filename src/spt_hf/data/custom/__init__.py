"""The generic task, ``task: custom``: a user's own data described by ``task_options`` (docs/own-data.md).

``sources`` reads the one source the options name: a ``data_dir`` layout (``folders``), local files (``files``) in
one of the table of ``formats``, or a Hub id; ``raw`` holds what it returns. ``infer`` makes the typed
``Inference`` from it, and ``task`` the spec.
"""
