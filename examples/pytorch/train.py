"""A PyTorch training script that runs unchanged on a laptop CPU, on a GPU with mixed
precision, and as several ranks with DistributedDataParallel -- submitted to Qanat as
an ordinary command job:

    qanat jobs -p demo submit --name mlp --ranks 2 -- python examples/pytorch/train.py

What it relies on from Qanat is only the environment every job gets:
- MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN, MLFLOW_RUN_ID: `mlflow` logs into the
  job's run with no configuration of its own;
- RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: torch.distributed's env://
  rendezvous (the same variables torchrun sets);
- QANAT_CHECKPOINT_DIR: a directory that survives retries and preemption, so an
  attempt resumes where the last one stopped;
- CUDA_VISIBLE_DEVICES: the GPUs the scheduler gave this rank (empty: none).

It trains a small classifier on synthetic data (or on a CSV given with --data, last
column the label), logs parameters and per-epoch metrics, saves a checkpoint every
epoch, and at the end exports the model to ONNX and logs it (optionally registering
it with --register-as).
"""

import argparse
import gc
import os
import signal
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--data", help="a CSV file; the last column is the class label")
    p.add_argument("--epoch-sleep", type=float, default=0.0, help="seconds to pause per epoch (demos of preemption)")
    p.add_argument("--register-as", help="register the ONNX model under this name")
    return p.parse_args()


def dataset(args, seed=0):
    if args.data:
        table = np.loadtxt(args.data, delimiter=",", skiprows=1, dtype=np.float32)
        x, y = table[:, :-1], table[:, -1].astype(np.int64)
    else:
        # Two interleaved spirals: not linearly separable, learnable by a small MLP.
        rng = np.random.default_rng(seed)
        n = args.samples // 2
        t = np.sqrt(rng.random(n)) * 3 * np.pi
        a = np.stack([t * np.cos(t), t * np.sin(t)], 1) / 10
        b = -a
        x = np.concatenate([a, b]).astype(np.float32) + rng.normal(0, 0.02, (2 * n, 2)).astype(np.float32)
        y = np.concatenate([np.zeros(n), np.ones(n)]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


class MLP(nn.Module):
    def __init__(self, inputs, hidden, classes):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    def forward(self, x):
        return self.net(x)


def save_checkpoint(path, state):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash mid-write never leaves a torn checkpoint


def main():
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank % max(torch.cuda.device_count(), 1)}" if cuda else "cpu")
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo", init_method="env://")
    # Preemption sends SIGTERM: finish cleanly (the last checkpoint is on disk).
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))

    torch.manual_seed(0)
    x, y = dataset(args)
    classes = int(y.max()) + 1
    model = MLP(x.shape[1], args.hidden, classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=cuda)

    ckpt_dir = os.environ.get("QANAT_CHECKPOINT_DIR", "checkpoints")
    os.makedirs(ckpt_dir, exist_ok=True)
    ckpt = os.path.join(ckpt_dir, "last.pt")
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        start = state["epoch"] + 1
        print(f"rank {rank}: resuming from epoch {start} ({ckpt})", flush=True)
    net = DDP(model, device_ids=[device.index] if cuda else None) if world > 1 else model

    # Each rank trains on its own shard.
    shard = torch.arange(rank, len(x), world)
    xs, ys = x[shard].to(device), y[shard].to(device)

    mlflow = None
    if rank == 0 and os.environ.get("MLFLOW_TRACKING_URI"):
        import mlflow as _mlflow

        mlflow = _mlflow
        mlflow.start_run()  # MLFLOW_RUN_ID: the job's run, resumed on every attempt
        if start == 0:
            mlflow.log_params(
                {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr, "hidden": args.hidden,
                 "world_size": world, "device": device.type, "mixed_precision": cuda}
            )

    for epoch in range(start, args.epochs):
        began = time.time()
        net.train()
        perm = torch.randperm(len(xs), device=device)
        total, correct, loss_sum = 0, 0, 0.0
        for i in range(0, len(xs), args.batch_size):
            idx = perm[i : i + args.batch_size]
            xb, yb = xs[idx], ys[idx]
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=cuda):
                out = net(xb)
                loss = nn.functional.cross_entropy(out, yb)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss_sum += loss.item() * len(idx)
            correct += (out.argmax(1) == yb).sum().item()
            total += len(idx)
        stats = torch.tensor([loss_sum, correct, total], dtype=torch.float64, device=device)
        if world > 1:
            dist.all_reduce(stats)
        loss_avg, acc = (stats[0] / stats[2]).item(), (stats[1] / stats[2]).item()
        if rank == 0:
            save_checkpoint(
                ckpt,
                {"model": model.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict(), "epoch": epoch},
            )
            print(f"epoch {epoch}: loss {loss_avg:.4f} accuracy {acc:.3f} ({time.time() - began:.2f}s)", flush=True)
            if mlflow:
                mlflow.log_metrics({"loss": loss_avg, "accuracy": acc}, step=epoch)
        if args.epoch_sleep:
            time.sleep(args.epoch_sleep)
        if stop["now"]:
            print(f"rank {rank}: stopping after epoch {epoch} (SIGTERM); the checkpoint is saved", flush=True)
            if world > 1:
                dist.destroy_process_group()
            raise SystemExit(143)

    if rank == 0:
        model.eval()
        onnx_path = os.path.join(os.getcwd(), "model.onnx")
        torch.onnx.export(
            model.cpu().float(),
            x[:1],
            onnx_path,
            input_names=["features"],
            output_names=["logits"],
            dynamic_axes={"features": {0: "batch"}, "logits": {0: "batch"}},
            dynamo=False,
        )
        print(f"exported {onnx_path}", flush=True)
        if mlflow:
            import onnx

            mlflow.log_artifact(ckpt, artifact_path="checkpoints")
            mlflow.log_artifact(onnx_path, artifact_path="onnx")
            mlflow.onnx.log_model(
                onnx.load(onnx_path), name="model", registered_model_name=args.register_as
            )
            mlflow.end_run()
    if world > 1:
        # Drop DDP (its reducer holds the process group) while the interpreter is fully
        # alive: left to interpreter shutdown, gloo's threads can be torn down after
        # Python is gone and abort the rank ("terminate called without an active
        # exception", seen once in CI on a rank that had finished).
        del net
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
