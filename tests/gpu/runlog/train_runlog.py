"""train_runlog.py: GPT-2 (tests/gpu/model_language/gpt2_model.py: 6 layers, batch 8 x 512, AdamW)
trained until killed, for tests/gpu/runlog/run.sh (issue 50: the whole run kept). Prints, flushed,
"params B" once (the parameters' bytes), then after each step "step K pid P reserved R allocated A"
(torch.cuda.memory_reserved and memory_allocated right after the optimizer's step); keeps 1.57
MiB a step from step 0 (a leak the whole run's log must trace back to step 0)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model_language"))
import gpt2_model  # noqa: E402

config, model, opt = gpt2_model.build()
print("params %d" % sum(p.numel() * p.element_size() for p in model.parameters()), flush=True)
kept = []


def keep_for_later():
    kept.append(torch.empty(1646264, dtype=torch.uint8, device="cuda"))  # 1.57 MiB a step, never freed


for step in range(10**9):
    tokens = gpt2_model.batch(config)
    loss = model(tokens, labels=tokens).loss
    loss.backward()
    opt.step()
    reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    opt.zero_grad(set_to_none=True)
    keep_for_later()
    torch.cuda.synchronize()
    print("step %d pid %d reserved %d allocated %d" % (step, os.getpid(), reserved, allocated), flush=True)
