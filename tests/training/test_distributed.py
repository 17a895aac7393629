"""Two gloo processes under torchrun train with DDP and end with identical weights."""

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from training import distributed
    from training.engine import Trainer, train_one_epoch
    from training.optim import build_scheduler, build_sgd
    from training.data.loader import LoaderRequest
    from training.detectors.registry import get_task

    data, out = sys.argv[1], sys.argv[2]
    info = distributed.init_distributed("cpu")
    torch.manual_seed(0)  # same initial weights on both ranks (DDP also broadcasts rank 0's)
    task = get_task("ssd300")({"num_classes": 6, "backbone": "resnet18"})
    model = task.build_model()
    ddp = DistributedDataParallel(model)
    request = LoaderRequest("torch", data, "train", 2, 0, seed=1, rank=info.rank, world_size=info.world_size)
    loader = task.train_loader(request)
    optimizer = build_sgd(model, 0.01, 0.9, 5e-4)
    scheduler = build_scheduler(optimizer, kind="cosine", total_iters=2, warmup_iters=0)
    loader.set_epoch(0)
    trainer = Trainer(
        task=task, model=ddp, criterion=task.build_criterion(), optimizer=optimizer, scheduler=scheduler,
        scaler=torch.amp.GradScaler("cpu", enabled=False), device=info.device, max_iters=2,
        log_interval=100, world_size=info.world_size,
    )
    train_one_epoch(trainer, loader, epoch=0, start_iter=0)
    # Parameters only: DDP broadcasts rank 0's BatchNorm buffers at each forward, so after the last forward
    # each rank's running statistics are its own until the next one (checkpoints come from rank 0).
    torch.save(dict(model.named_parameters()), f"{out}/rank{info.rank}.pt")
    distributed.cleanup()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_process_gloo_ddp_ranks_end_identical(tiny_coco: Path, tmp_path: Path) -> None:
    script = tmp_path / "ddp_step.py"
    script.write_text(SCRIPT)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        str(script),
        str(tiny_coco),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rank0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    initial = get_initial_state()
    assert rank0.keys() == initial.keys()
    changed = 0
    for key, value in rank0.items():
        assert torch.equal(value, rank1[key]), key
        changed += int(not torch.equal(value, initial[key]))
    assert changed > 0  # the ranks really trained, and stayed in step


def get_initial_state() -> dict[str, torch.Tensor]:
    from training.detectors.ssd300.model import SSD300

    torch.manual_seed(0)
    return dict(SSD300(num_classes=6, backbone="resnet18").named_parameters())
