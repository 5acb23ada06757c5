"""gpt2_model.py: the model, optimizer and inputs of tests/gpu/zoo/programs/gpt2_train.py at its
defaults (HF GPT-2 from a config, no weights; AdamW at 1e-4; random tokens as inputs and labels),
for the scripts here that track it (memtracker_gpt2.py) or time it (cost.py). gpt2_train.py is an
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
