"""generate.py: inference with Hugging Face generate(): GPT-2 (12 layers) in eval mode writes
16 new tokens for a batch of 8 prompts, 6 times (a KV cache that grows token by token inside each
call and is released at its end). No optimizer.

  python3 generate.py [--calls 6] [--new-tokens 16] [--leak]

--leak keeps every call's output logits (output_scores).
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--calls", type=int, default=6)
p.add_argument("--new-tokens", type=int, default=16)
p.add_argument("--leak", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
config = GPT2Config(n_layer=12)
model = GPT2LMHeadModel(config).cuda().eval()
kept = []
with torch.no_grad():
    for call in range(args.calls):
        prompts = torch.randint(0, config.vocab_size, (8, 64), device="cuda")
        out = model.generate(prompts, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,  # zoo: leak
                             pad_token_id=0, return_dict_in_generate=True, output_scores=args.leak)
        if args.leak:
            kept.append(out.scores)
print("tokens", out.sequences.shape[1], flush=True)
