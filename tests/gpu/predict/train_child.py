"""train_child.py: the training program predict_check.py and whatif_check.py run, natively or under
`memsnap run`, one process per measurement. Everything comes from the environment:

  MODEL      gpt2 (transformers' GPT2LMHeadModel from GPT2Config: 12 layers, sequence 1024),
             linear (two Linear(8192, 8192)) or resnet50 (torchvision, 224x224 images, 1000 classes)
  BATCH      the batch; STEPS the steps
  CKPT       "" (none), "all" (GPT-2: gradient_checkpointing_enable(); resnet50: every stage), or
             the blocks to wrap in torch.utils.checkpoint (non-reentrant): GPT-2's block indices
             "3,4,5", resnet50's stage names "layer1,layer2"
  OPT        adamw (default), adam, sgd, sgd-momentum, adagrad, rmsprop, adafactor
  USE_CACHE  GPT-2's use_cache (default 0; predict_check.py's runs keep transformers' default, 1)
  CAP_BYTES, FRACTION  a memory cap: set_per_process_memory_fraction(cap / card * fraction)

It prints one line "RESULT {json}" (peak allocated and reserved from torch.cuda's counters, the last
loss, whether it ran out of memory) and exits 3 when it ran out of memory.
"""
import json, os, sys
import torch

model_name = os.environ.get("MODEL", "gpt2")
batch, steps = int(os.environ["BATCH"]), int(os.environ["STEPS"])
ckpt = os.environ.get("CKPT", "")
opt_name = os.environ.get("OPT", "adamw")
cap = int(os.environ.get("CAP_BYTES", "0"))
fraction = float(os.environ.get("FRACTION", "1"))
total = torch.cuda.get_device_properties(0).total_memory
if cap:
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total * fraction))
torch.manual_seed(0)


def checkpointed(module):
    """module's forward run under torch.utils.checkpoint (non-reentrant)."""
    import torch.utils.checkpoint as cp
    orig = module.forward

    def forward(*args, **kwargs):
        return cp.checkpoint(orig, *args, use_reentrant=False, **kwargs)
    module.forward = forward


if model_name == "gpt2":
    from transformers import GPT2Config, GPT2LMHeadModel
    seq = 1024
    config = GPT2Config(n_layer=12, n_positions=seq, use_cache=os.environ.get("USE_CACHE", "0") == "1")
    model = GPT2LMHeadModel(config).cuda()
    if ckpt == "all":
        model.gradient_checkpointing_enable()
    elif ckpt:
        for i in [int(x) for x in ckpt.split(",")]:
            checkpointed(model.transformer.h[i])

    def batch_loss():
        x = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
        return model(x, labels=x).loss
elif model_name == "resnet50":
    import torchvision
    model = torchvision.models.resnet50().cuda()
    stages = ["layer1", "layer2", "layer3", "layer4"] if ckpt == "all" else [s for s in ckpt.split(",") if s]
    for s in stages:
        checkpointed(getattr(model, s))

    def batch_loss():
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        return torch.nn.functional.cross_entropy(model(x), y)
elif model_name == "linear":
    model = torch.nn.Sequential(torch.nn.Linear(8192, 8192), torch.nn.Linear(8192, 8192)).cuda()

    def batch_loss():
        x = torch.randn(batch, 8192, device="cuda")
        return model(x).square().mean()
else:
    raise SystemExit("train_child.py: unknown MODEL " + model_name)
model.train()
params = model.parameters()
if opt_name == "adamw": opt = torch.optim.AdamW(params, lr=1e-4)
elif opt_name == "adam": opt = torch.optim.Adam(params, lr=1e-4)
elif opt_name == "sgd": opt = torch.optim.SGD(params, lr=1e-4)
elif opt_name == "sgd-momentum": opt = torch.optim.SGD(params, lr=1e-4, momentum=0.9)
elif opt_name == "adagrad": opt = torch.optim.Adagrad(params, lr=1e-4)
elif opt_name == "rmsprop": opt = torch.optim.RMSprop(params, lr=1e-4)
elif opt_name == "adafactor": opt = torch.optim.Adafactor(params, lr=1e-4)
else: raise SystemExit("train_child.py: unknown optimizer " + opt_name)
result = {"model": model_name, "batch": batch, "steps": steps, "ckpt": ckpt, "opt": opt_name, "cap_bytes": cap,
          "total_bytes": total, "oom": False, "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
try:
    for step in range(steps):
        loss = batch_loss()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    result["loss"] = float(loss.item())
except (torch.OutOfMemoryError, RuntimeError) as e:  # a library's own allocation can fail as a RuntimeError
    if not isinstance(e, torch.OutOfMemoryError) and "out of memory" not in str(e).lower():
        raise
    result["oom"] = True
    result["error"] = str(e).splitlines()[0][:300]
result["peak_allocated"] = torch.cuda.max_memory_allocated()
result["peak_reserved"] = torch.cuda.max_memory_reserved()
print("RESULT " + json.dumps(result), flush=True)
sys.exit(3 if result["oom"] else 0)
