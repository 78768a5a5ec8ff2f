"""Readers of the source formats, each yielding examples already in a task's features.

- ``lra``: the Long Range Arena release (ListOps TSV, AAN TSV, Pathfinder PNGs and metadata).
- ``hub_datasets``: datasets of the Hugging Face Hub or local copies of them (IMDb, CIFAR-10, Speech Commands).
- ``timeseries``: ``.ts`` regression files (BIDMC, aeon's sets).
- ``offline``: real data that installs offline (scikit-learn digits, Fashion-MNIST, recorded spoken digits).
- ``audio``: PCM WAV decoding and fixed-length resampling.

Readers raise :class:`~spt_hf.data.spec.DataFormatError` naming the file, the line or item and the expected format.
"""
