from pathlib import Path

import pytest

from training.data.synthetic import SyntheticConfig, generate_dataset


@pytest.fixture(scope="session")
def tiny_coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic COCO-format dataset (8 train / 4 val images, small sides) shared by the session."""
    root = tmp_path_factory.mktemp("tiny_coco")
    generate_dataset(root, num_train=8, num_val=4, seed=3, config=SyntheticConfig(side_range=(96, 160)))
    return root
