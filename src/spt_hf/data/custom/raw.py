"""What reading a custom task's source returns, before anything is inferred from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import datasets


@dataclass(frozen=True)
class LabelHint:
    """What the source itself says about its labels (a ``ClassLabel`` feature, a ``.ts`` ``@classLabel`` header);
    it wins over the values' dtype when the problem type is inferred.

    Args:
        problem_type: ``"single_label_classification"`` or ``"regression"``, or ``None`` when the source is silent.
        class_names: the class names in the source's own order, when it lists them.
        evidence: one phrase for the task card, e.g. ``"@classLabel true 1 2 3 in GunPoint_TRAIN.ts"``.
        column: the label column the hint is about.
    """

    problem_type: str | None = None
    class_names: tuple[str, ...] | None = None
    evidence: str = ""
    column: str = "label"


@dataclass(frozen=True)
class RawSource:
    """The splits of a custom task's source as read, with the source's own column names.

    Args:
        splits: split name (``train``, ``validation``, ``test``, or any name the source uses) -> an Arrow-backed
            ``datasets.Dataset`` (memory-mapped where a builder or cache made it).
        kind: the format read (``csv``, ``json``, ``parquet``, ``arrow``, ``text``, ``ts``, ``ucr``, ``fasta``,
            ``npz``, ``save_to_disk``, ``class_folders``, ``hub``).
        files: the local files read (hashed into the cache key and named in the card); empty for a Hub id.
        description: one line for ``spt-hf inspect`` and the card, e.g. ``"GunPoint_TRAIN.ts + GunPoint_TEST.ts"``.
        label_hint: what the source says about labels, if anything.
        hub_id: the Hub dataset id, with ``hub_config`` and ``hub_revision`` (the resolved commit when known).
    """

    splits: dict[str, datasets.Dataset]
    kind: str
    files: tuple[Path, ...] = ()
    description: str = ""
    label_hint: LabelHint | None = None
    hub_id: str | None = None
    hub_config: str | None = None
    hub_revision: str | None = None
    columns_info: dict[str, str] = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        """The columns of the first split (all splits of one source share them)."""
        return list(next(iter(self.splits.values())).column_names) if self.splits else []
