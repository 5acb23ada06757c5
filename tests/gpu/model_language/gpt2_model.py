"""gpt2_model.py: the model, optimizer and inputs of tests/gpu/zoo/programs/gpt2_train.py at its
defaults (HF GPT-2 from a config, no weights; AdamW at 1e-4; random tokens as inputs and labels),
for the scripts here that track it (memtracker_gpt2.py) or time it (cost.py, and
tests/gpu/leaks/cost.py: timed_steps). gpt2_train.py is an
ordinary script that trains when imported, so its few lines of construction are repeated here;
keep the two alike."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def build(layers=6, seq=512):
    """(config, model, optimizer) as gpt2_train.py makes them."""
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_positions=max(1024, seq))
    model = GPT2LMHeadModel(config).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return config, model, opt


def batch(config, size=8, seq=512):
    """One step's tokens (inputs and labels), as gpt2_train.py draws them."""
    return torch.randint(0, config.vocab_size, (size, seq), device="cuda")


def timed_steps(config, model, opt, warmup, steps):
    """Runs warmup + steps training steps (forward with the loss, backward, AdamW's step) and
    returns the seconds of each of the last `steps`, each timed between two
    torch.cuda.synchronize() calls."""
    import time
    times = []
    for step in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x = batch(config)
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
        del out
    return times
