"""long_run.py: GPT-2 trained until killed, for tests/gpu/crash/long_run.sh (issue 50): the model,
optimizer and inputs of tests/gpu/model_language/gpt2_model.py (HF GPT-2 from a config, 6 layers,
batch 8 x 512, AdamW). Prints, flushed, its parameters' bytes once ("params BYTES"), then after
each step, once the GPU is done with it: "step N pid P reserved R allocated A" from
torch.cuda.memory_reserved() and memory_allocated()."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "model_language"))
import gpt2_model  # noqa: E402

config, model, opt = gpt2_model.build()
print("params %d" % sum(p.numel() * p.element_size() for p in model.parameters()), flush=True)
step = 0
while True:
    x = gpt2_model.batch(config)
    out = model(input_ids=x, labels=x)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out, x
    torch.cuda.synchronize()
    print("step %d pid %d reserved %d allocated %d" % (step, os.getpid(), torch.cuda.memory_reserved(),
                                                       torch.cuda.memory_allocated()), flush=True)
    step += 1
