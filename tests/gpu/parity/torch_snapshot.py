"""torch_snapshot.py OUT.pickle: a small PyTorch training loop on the GPU, recorded with PyTorch's
own recorder (native caching allocator) and dumped with torch.cuda.memory._dump_snapshot, for
`memsnap import` (tests/gpu/parity/run_interop.sh). It keeps every step's loss tensor (with its graph)
in a list: a growing leak at the line marked LEAK, 5 iterations marked by record_function."""
import sys

import torch

torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.Adam(model.parameters())
kept = []
for step in range(5):
    with torch.autograd.profiler.record_function("train_step"):
        x = torch.randn(512, 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        kept.append(model(x).sum())  # LEAK: an output (and its graph) kept every step
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(sys.argv[1])
print("dumped", sys.argv[1])
