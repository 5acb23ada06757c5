"""cnn_train.py: an image classifier trained on random images: torchvision's resnet50 (or a timm
model with --timm NAME), batch 32 at 224x224, SGD with momentum, 6 steps.

  python3 cnn_train.py [--timm NAME] [--steps 6] [--batch 32] [--amp] [--init-scale S] [--leak]

--amp trains in fp16 autocast with a GradScaler whose first scale (--init-scale, default 2**24)
overflows the fp16 gradients: the scaler skips the first steps' optimizer step and halves its
scale each time, as it does on inf/NaN gradients (issue 42); the program prints how many steps it
skipped (2**24: all of ten; a lower first scale, the first few).
--leak keeps every step's logits with their graph (`kept.append(out)`): the graph's saved
activations stay alive with them.
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--timm", default="")
p.add_argument("--steps", type=int, default=6)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--amp", action="store_true")
p.add_argument("--init-scale", type=float, default=2.0 ** 24)  # GradScaler's first scale (with --amp)
p.add_argument("--leak", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
if args.timm:
    import timm
    model = timm.create_model(args.timm, num_classes=1000).cuda()
else:
    import torchvision
    model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
scaler = torch.amp.GradScaler("cuda", init_scale=args.init_scale) if args.amp else None
skipped = 0
kept = []
for step in range(args.steps):
    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")
    with torch.autocast("cuda", dtype=torch.float16, enabled=args.amp):
        out = model(x)
        loss = loss_fn(out, y)
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        skipped += scaler.get_scale() < scale  # the scale falls only when the step was skipped
    if args.leak:
        kept.append(out.detach().clone())  # zoo: leak
if scaler is not None:
    print("skipped steps %d of %d" % (skipped, args.steps), flush=True)
print("loss %.4f" % loss.item(), flush=True)
