"""Category ids of a COCO-format dataset <-> the contiguous labels a detector predicts.

Label 0 is background; the dataset's categories become 1..C in the order they appear in the
annotation file's ``categories`` list (NVIDIA's SSD and DALI's COCO reader do the same, so a checkpoint
trained on either loader maps back to the same COCO ids for evaluation and export).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class _HasCategories(Protocol):
    """What :meth:`LabelMap.from_coco` needs from a ``pycocotools.coco.COCO`` object."""

    dataset: dict[str, Any]


@dataclass(frozen=True)
class LabelMap:
    """COCO category ids and names, in label order (index ``i`` is label ``i + 1``).

    Attributes:
        coco_ids: category id per contiguous label 1..C.
        names: category name per contiguous label 1..C.
    """

    coco_ids: tuple[int, ...]
    names: tuple[str, ...]
    _to_label: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.coco_ids) != len(self.names):
            raise ValueError(f"{len(self.coco_ids)} category ids but {len(self.names)} names")
        if len(set(self.coco_ids)) != len(self.coco_ids):
            raise ValueError(f"duplicate category ids in {list(self.coco_ids)}")
        object.__setattr__(self, "_to_label", {cid: i + 1 for i, cid in enumerate(self.coco_ids)})

    @classmethod
    def from_categories(cls, categories: Sequence[Mapping[str, Any]]) -> LabelMap:
        """From a COCO ``categories`` list (dicts with ``id`` and ``name``), keeping its order."""
        return cls(
            coco_ids=tuple(int(c["id"]) for c in categories),
            names=tuple(str(c["name"]) for c in categories),
        )

    @classmethod
    def from_coco(cls, coco: _HasCategories) -> LabelMap:
        """From a ``pycocotools.coco.COCO`` object.

        Reads ``coco.dataset["categories"]`` (file order) rather than ``coco.cats`` / ``getCatIds()``,
        which are dicts keyed by id and would not document the order the labels depend on.
        """
        return cls.from_categories(coco.dataset.get("categories", []))

    @property
    def num_classes(self) -> int:
        """C, the number of object classes (background not counted)."""
        return len(self.coco_ids)

    def to_contiguous(self, coco_id: int) -> int:
        """COCO category id -> label in 1..C."""
        try:
            return self._to_label[int(coco_id)]
        except KeyError:
            raise KeyError(f"category id {coco_id} is not in the label map {list(self.coco_ids)}") from None

    def to_coco_id(self, label: int) -> int:
        """Label in 1..C -> COCO category id (label 0, background, has none)."""
        if not 1 <= int(label) <= self.num_classes:
            raise KeyError(f"label {label} is outside 1..{self.num_classes}")
        return self.coco_ids[int(label) - 1]

    def name(self, label: int) -> str:
        """Label in 1..C -> category name."""
        self.to_coco_id(label)  # validates the range
        return self.names[int(label) - 1]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form stored in checkpoints and export manifests."""
        return {
            "categories": [
                {"label": i + 1, "coco_id": cid, "name": name}
                for i, (cid, name) in enumerate(zip(self.coco_ids, self.names, strict=True))
            ]
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LabelMap:
        """Inverse of :meth:`to_dict`; labels must be exactly 1..C."""
        cats = sorted(data["categories"], key=lambda c: int(c["label"]))
        labels = [int(c["label"]) for c in cats]
        if labels != list(range(1, len(cats) + 1)):
            raise ValueError(f"labels must be 1..{len(cats)}, got {labels}")
        return cls(
            coco_ids=tuple(int(c["coco_id"]) for c in cats),
            names=tuple(str(c["name"]) for c in cats),
        )
