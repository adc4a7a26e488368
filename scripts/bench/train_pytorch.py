"""PyTorch's side of the trainer benchmark: the same MLP (inputs -> hidden... -> 1,
ReLU), BCE-with-logits, Adam (lr 1e-3, eps 1e-8), minibatches in a shuffled order,
float32 on CPU with the thread count given; times the minibatch steps only and skips the
first epoch (warm-up), as crates/qanat-train/examples/throughput.rs does. With DEVICE
cuda the model and data live on the GPU, the device is synchronized before each clock
reading, and PRECISION bf16 or fp16 runs the steps under torch.autocast (fp16 with a
GradScaler), as crates/qanat-train/examples/gpu_check.rs does for Qanat.
usage: train_pytorch.py ROWS INPUTS HIDDEN BATCH EPOCHS THREADS [DEVICE [PRECISION]]"""

import json
import sys
import time

import torch

rows, inputs = int(sys.argv[1]), int(sys.argv[2])
hidden = [int(h) for h in sys.argv[3].split(",")]
batch, epochs, threads = int(sys.argv[4]), max(2, int(sys.argv[5])), int(sys.argv[6])
device = sys.argv[7] if len(sys.argv) > 7 else "cpu"
precision = sys.argv[8] if len(sys.argv) > 8 else "fp32"
half = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
torch.set_num_threads(threads)
torch.manual_seed(1)
x = torch.rand(rows, inputs) * 2 - 1
y = (x[:, 0] > 0).float().unsqueeze(1)
layers, width = [], inputs
for h in hidden:
    layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
    width = h
model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(device)
x, y = x.to(device), y.to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-8)
scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
loss_fn = torch.nn.BCEWithLogitsLoss()
timed = 0.0
for epoch in range(epochs):
    order = torch.randperm(rows, device=device)
    sync()
    t = time.perf_counter()
    for i in range(0, rows, batch):
        idx = order[i : i + batch]
        opt.zero_grad()
        with torch.autocast(device, dtype=half or torch.float32, enabled=half is not None):
            loss = loss_fn(model(x[idx]).float(), y[idx])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    sync()
    if epoch > 0:
        timed += time.perf_counter() - t
print(json.dumps({"impl": f"pytorch {torch.__version__}", "device": device, "precision": precision, "rows": rows, "inputs": inputs, "hidden": hidden,
                  "batch": batch, "epochs_timed": epochs - 1, "threads": threads, "seconds": round(timed, 3),
                  "samples_per_s": round(rows * (epochs - 1) / timed)}))
