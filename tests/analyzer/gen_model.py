"""gen_model.py: snapshots of a transformer-like training program, written directly (no GPU,
no recorder), for `memsnap predict --checkpoint/--optimizer/--advise`'s tests
(tests/analyzer/test_predict_model.sh).

The program is written as a program, not as a trace edited afterwards: with --checkpoint it
*is* the checkpointed program (each checkpointed block frees what it saved once its forward no
longer uses it, and runs its forward again before its backward), with --optimizer the other optimizer
makes its own state. So a prediction from the plain program's snapshot can be checked against
the replay of the changed program's snapshot, computed independently.

  python3 gen_model.py OUT.db --batch B [--steps S] [--layers L] [--checkpoint all|none|I,J,...]
      [--optimizer adamw|sgd|sgd-momentum] [--events] [--gelu-fn] [--capacity BYTES] [--root CLASS]
      [--params [--autocast] [--keep-grads]] [--convert]

--params (with --events) also tells the parameters (tensor events of role 1 at the first forward,
labelled Model.blocks.I.attn, Model.blocks.I.mlp, Model.head) and the gradients (role 2 at each
step's beginning), records the root's module events (Model), and runs zero_grad(set_to_none=True):
the gradients are made in every backward and freed after each step, as PyTorch's default does
(`memsnap predict --shard`'s tests, tests/analyzer/test_predict_shard.sh). --autocast adds what
torch.autocast does to a block's parameters: a bf16 copy of each made in its forward, saved for its
backward and freed there; --keep-grads makes the gradients once and keeps them
(zero_grad(set_to_none=False)). --convert makes the model in twice its parameters' bytes and converts it
before the first forward (each parameter copied, the original freed), as model.to(torch.bfloat16) does.

Stacks: Python frames (Block.forward in model.py, Model.forward, main in train.py; AdamW.step
and _init_group in torch/optim/adamw.py; Linear.__init__ in torch/nn/modules/linear.py) and
autograd's native frames in the backward pass, as memsnap run records them. --events adds the
model's events (issue 42's module, tensor, step and backward events: module paths
Model.blocks.I). Block I's attention scores grow with I, so that the blocks save different bytes.

Each block's forward: ln1 (its output and a small statistic, saved), q (saved), scores (saved), a
temporary, r1 = attention + input (saved), m1, m2 (saved), m3 (a temporary of the forward),
out = r1 + m3 (the output: the next block's ln1 saves it). Its backward: gradients, then the
saved blocks freed, its input freed (ln1's saved input), the statistic freed last.
"""
import argparse
import os
import re
import sqlite3
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TORCH = "/usr/lib/python3/dist-packages/torch"
ALLOC, FREE_REQ, FREE_DONE, MODULE, TENSOR, STEP, BACKWARD = 1, 2, 3, 15, 16, 17, 18


def schema_sql():
    text = open(os.path.join(ROOT, "recorder", "snapshot_schema.h")).read()
    block = text[text.index("memsnap_schema_sql[] ="):]
    block = block[:block.index('";\n') + 2]
    block = block.replace('MEMSNAP_STRINGIFY(MEMSNAP_FORMAT_VERSION)', '"1"')
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', block))


def kinds():
    text = open(os.path.join(ROOT, "recorder", "snapshot_schema.h")).read()
    return re.findall(r'X\(\w+, "(\w+)"\)', text)


class Program:
    def __init__(self, a):
        self.a = a
        self.events = []
        self.frames, self.frame_ids = [], {}
        self.stacks, self.stack_ids = [], {}
        self.labels, self.label_ids = [], {}
        self.next_addr = 0x7f0000000000
        self.live = {}
        self.t = 0

    # frames, stacks, labels
    def frame(self, kind, name, file, line):
        key = (kind, name, file, line)
        if key not in self.frame_ids:
            self.frames.append(key)
            self.frame_ids[key] = len(self.frames)
        return self.frame_ids[key]

    def stack(self, *frames):  # innermost first
        key = tuple(self.frame(*f) for f in frames)
        if key not in self.stack_ids:
            self.stacks.append(key)
            self.stack_ids[key] = len(self.stacks)
        return self.stack_ids[key]

    def label(self, text):
        if text not in self.label_ids:
            self.labels.append(text)
            self.label_ids[text] = len(self.labels)
        return self.label_ids[text]

    # events
    def ev(self, kind, address=0, size=0, requested=0, extra=None, stack=0, device=0):
        self.t += 1000
        self.events.append((len(self.events) + 1, self.t, kind, device, 0, address, size, requested, extra, 1, stack))

    def alloc(self, request, stack):
        addr = self.next_addr
        self.next_addr += ((request + 511) // 512) * 512 + 512
        size = ((request + 511) // 512) * 512
        self.live[addr] = size
        self.ev(ALLOC, addr, size, request, None, stack)
        return addr

    def free(self, addr, stack):
        size = self.live.pop(addr)
        self.ev(FREE_REQ, addr, size, size, None, stack)
        self.ev(FREE_DONE, addr, size, size, None, stack)

    def module_root(self, what):
        self.ev(MODULE, 0, what, 0, self.label(self.a.root), 0, None)

    def module(self, path, what):
        if self.a.events:
            self.ev(MODULE, 0, what, 0, self.label(self.a.root + "." + path), 0, None)


def op(name):
    return ("native", name, "", 0)


def py(name, file, line):
    return ("python", name, file, line)


def generate(a):
    p = Program(a)
    B, L, T, H = a.batch, a.layers, 128, 256
    ckpt = set(range(L)) if a.checkpoint == "all" else set() if a.checkpoint == "none" else \
        {int(x) for x in a.checkpoint.split(",")}
    main = lambda line: py("main", "/work/train.py", line)
    call = py("Module._call_impl", TORCH + "/nn/modules/module.py", 1527)
    model_fwd = lambda line: py("Model.forward", "/work/model.py", line)
    blk = lambda line: (op("at::native::empty_cuda"), py("Block.forward", "/work/model.py", line), call, model_fwd(11), call, main(6))
    head = lambda line: (op("at::native::empty_cuda"), model_fwd(line), call, main(6))
    engine = (op("torch::autograd::Engine::evaluate_function"), op("torch::autograd::Engine::thread_main"))
    bw = p.stack(op("at::native::empty_cuda"), *engine)
    acc = p.stack(op("torch::autograd::AccumulateGrad::apply"), *engine)
    opt_file = {"adamw": "adamw.py", "sgd": "sgd.py", "sgd-momentum": "sgd.py"}[a.optimizer]
    opt_cls = {"adamw": "AdamW", "sgd": "SGD", "sgd-momentum": "SGD"}[a.optimizer]
    init_group = p.stack(op("at::native::empty_cuda"), py(opt_cls + "._init_group", TORCH + "/optim/" + opt_file, 120),
                         py(opt_cls + ".step", TORCH + "/optim/" + opt_file, 210), main(8))
    opt_temp = p.stack(op("at::_foreach_sqrt"), py("_multi_tensor_" + a.optimizer.replace("-", "_"), TORCH + "/optim/" + opt_file, 400),
                       py(opt_cls + ".step", TORCH + "/optim/" + opt_file, 210), main(8))
    param_stack = p.stack(op("at::native::empty_cuda"), py("Linear.__init__", TORCH + "/nn/modules/linear.py", 98), main(3))

    # parameters: two matrices and a vector per block, the head's
    sizes = []
    for i in range(L):
        sizes += [H * H * 4 + 4096 * i, H * 4 * H * 4, H * 4]
    sizes.append(1000 * H * 4)
    if a.convert:  # the model made in twice the bytes, then converted parameter by parameter
        to_copy = p.stack(op("at::_to_copy"), py("Module._apply", TORCH + "/nn/modules/module.py", 942), main(4))
        originals = [p.alloc(2 * n, param_stack) for n in sizes]
        params = []
        for n, orig in zip(sizes, originals):
            params.append(p.alloc(n, to_copy))
            p.free(orig, to_copy)
    else:
        params = [p.alloc(n, param_stack) for n in sizes]
    grads, state = {}, []
    loss = None
    owner = lambda k: p.label(a.root + (".head" if k == len(params) - 1 else ".blocks.%d.%s" % (k // 3, "attn" if k % 3 == 0 else "mlp")))
    for step in range(a.steps):
        if a.params:
            p.module_root(0)
        if a.params and step == 0:
            for k, addr in enumerate(params):
                p.ev(TENSOR, addr, p.live[addr], 1, owner(k), 0, 0)
        if loss is not None:
            p.free(loss, p.stack(*head(14)))  # the loop rebinds it
        tok = B * T
        x = p.alloc(tok * H * 4 + 12, p.stack(*head(10)))
        saved, outs = [], []
        inp = x

        # --gelu-fn: m1 and m2 are made in a function of their own (GELU.forward, called from
        # Block.forward's line 23), where a checkpointed forward's drops differ from its end
        gelu = lambda o: (op(o), py("GELU.forward", "/work/model.py", 40), call) + blk(23)[1:]

        def forward(i, inp, drop=False):
            """Block i's forward; `drop`: as a checkpointed forward runs it, saving nothing: each
            block dropped once no longer used (without --gelu-fn, all in one function: at its end)."""
            s = {}
            s["a1"] = p.alloc(tok * H * 4, p.stack(*blk(20)))
            s["mean"] = p.alloc(tok * 8, p.stack(op("at::native::layer_norm"), *blk(20)[1:]))
            s["q"] = p.alloc(tok * H * 4 * 3, p.stack(*blk(21)))
            s["scores"] = p.alloc(B * 4 * T * T * 2 + 20000 * i * B, p.stack(op("at::native::bmm"), *blk(21)[1:]))
            t1 = p.alloc(tok * H * 4, p.stack(op("at::native::softmax"), *blk(21)[1:]))
            p.free(t1, p.stack(op("at::native::softmax"), *blk(21)[1:]))
            s["r1"] = p.alloc(tok * H * 4, p.stack(*blk(22)))
            if drop and a.gelu_fn:  # used by Block.forward's operations until GELU's first
                for name in ["a1", "mean", "q", "scores"]:
                    p.free(s[name], p.stack(*blk(23)))
            s["m1"] = p.alloc(tok * H * 16, p.stack(*(gelu("at::native::empty_cuda") if a.gelu_fn else blk(23))))
            s["m2"] = p.alloc(tok * H * 16, p.stack(*(gelu("at::native::gelu") if a.gelu_fn else (op("at::native::gelu"),) + blk(23)[1:])))
            if drop and a.gelu_fn:  # r1 used by GELU's first operation, m1 by its second: until GELU returns
                for name in ["r1", "m1"]:
                    p.free(s[name], p.stack(*blk(23)))
            m3 = p.alloc(tok * H * 4, p.stack(op("at::native::addmm"), *blk(23)[1:]))
            out = p.alloc(tok * H * 4, p.stack(*blk(24)))
            p.free(m3, p.stack(*blk(24)))
            if drop:
                for name in ["m2"] if a.gelu_fn else ["a1", "mean", "q", "scores", "r1", "m1", "m2"]:
                    p.free(s[name], p.stack(*blk(24)))
            return s, out

        casts = []
        for i in range(L):
            p.module("blocks.%d" % i, 0)
            if a.autocast:
                casts.append([p.alloc(p.live[params[3 * i + j]] // 2, p.stack(op("at::_to_copy"), *blk(21)[1:])) for j in range(3)])
            s, out = forward(i, inp, drop=i in ckpt)
            if i in ckpt:  # checkpointed: it saved nothing
                s = None
            p.module("blocks.%d" % i, 1)
            saved.append(s)
            outs.append(out)
            inp = out
        f1 = p.alloc(tok * H * 4, p.stack(*head(12)))
        if a.params:
            p.module_root(1)
        logits = p.alloc(tok * 1000 * 4, p.stack(*head(13)))
        loss = p.alloc(4, p.stack(*head(13)))
        # backward
        if a.events:
            p.ev(BACKWARD, 0, 0, 0, None, p.stack(main(7)), None)
        if a.params:
            p.module_root(2)
        g_logits = p.alloc(tok * 1000 * 4, bw)
        p.free(logits, bw)
        g = p.alloc(tok * H * 4, bw)
        p.free(g_logits, bw)
        if step == 0 or (a.params and not a.keep_grads):
            grads[len(params) - 1] = p.alloc(1000 * H * 4, acc)
        p.free(outs[L - 1], bw)  # ln_f's saved input: the last block's output
        p.free(f1, bw)
        for i in reversed(range(L)):
            p.module("blocks.%d" % i, 2)
            s = saved[i]
            if s is None:  # recompute: the forward again, its output kept until its backward ends
                s, out_again = forward(i, outs[i - 1] if i else x)
            else:
                out_again = None
            g2 = p.alloc(tok * H * 16, bw)
            if step == 0 or (a.params and not a.keep_grads):
                for j in range(3):
                    grads[3 * i + j] = p.alloc([H * H * 4 + 4096 * i, H * 4 * H * 4, H * 4][j], acc)
            for name in ["m2", "m1", "r1", "scores", "q"]:
                p.free(s[name], bw)
            p.free(g2, bw)
            g_new = p.alloc(tok * H * 4, bw)
            p.free(g, bw)
            g = g_new
            p.free(outs[i - 1] if i else x, bw)  # ln1's saved input
            p.free(s["a1"], bw)
            p.free(s["mean"], bw)
            if out_again is not None:
                p.free(out_again, bw)
            for c in casts[i] if a.autocast else []:
                p.free(c, bw)
            p.module("blocks.%d" % i, 3)
        p.free(g, bw)
        if a.params:
            p.module_root(3)
        if a.events:
            p.ev(BACKWARD, 0, 1, 0, None, p.stack(main(7)), None)
        # the optimizer's step
        if a.events:
            p.ev(STEP, 0, 1, 0, p.label(opt_cls), 0, None)
        if a.params:
            for k in range(len(params)):
                p.ev(TENSOR, grads[k], p.live[grads[k]], 2, owner(k), 0, 0)
        if step == 0:
            n = {"adamw": 2, "sgd": 0, "sgd-momentum": 1}[a.optimizer]
            for k in range(len(params)):
                for _ in range(n):
                    state.append(p.alloc([H * H * 4 + 4096 * (k // 3), H * 4 * H * 4, H * 4][k % 3] if k < len(params) - 1
                                         else 1000 * H * 4, init_group))
            if a.events:
                for addr in state:
                    p.ev(TENSOR, addr, p.live[addr], 3, 0, 0, 0)
        if a.optimizer == "adamw":  # the foreach temporaries: a list the size of the parameters
            temps = [p.alloc(p.live[q], opt_temp) for q in params]
            for t in temps:
                p.free(t, opt_temp)
        if a.events:
            p.ev(STEP, 0, 2, 0, p.label(opt_cls), 0, None)
        if a.params and not a.keep_grads:  # zero_grad(set_to_none=True)
            for k in range(len(params)):
                p.free(grads.pop(k), p.stack(main(9)))
    p.free(loss, p.stack(*head(14)))
    for addr in list(grads.values()) + state + params:
        p.free(addr, p.stack(main(9)))
    return p


def write(p, path, capacity):
    if os.path.exists(path):
        os.remove(path)
    db = sqlite3.connect(path)
    db.executescript(schema_sql())
    db.executemany("insert into event_kinds values (?, ?)", list(enumerate(kinds(), 1)))
    meta = {"pid": 4242, "host": "gen_model", "backend": "sim", "tool_version": "gen_model", "stacks": "all",
            "dropped_events": 0, "recorded_events": len(p.events), "max_entries": 10 ** 8, "device_count": 1,
            "snapshot_ns": p.t + 1, "command_line": "python3 train.py"}
    db.executemany("insert into meta values (?, ?)", list(meta.items()))
    db.execute("insert into devices values (0, 'simulated', ?, ?, 0)", (capacity, capacity))
    db.executemany("insert into events values (?,?,?,?,?,?,?,?,?,?,?)", p.events)
    db.executemany("insert into frames(id, kind, name, file, line, module, pc, offset, inlined) values (?,?,?,?,?,?,?,?,0)",
                   [(i + 1, k, n, f, ln, "libtorch_cuda.so" if k == "native" else "", 0 if k == "native" else None,
                     0 if k == "native" else None) for i, (k, n, f, ln) in enumerate(p.frames)])
    db.executemany("insert into stacks values (?, ?)", [(i + 1, len(s)) for i, s in enumerate(p.stacks)])
    db.executemany("insert into stack_frames values (?, ?, ?)",
                   [(i + 1, j, f) for i, s in enumerate(p.stacks) for j, f in enumerate(s)])
    db.executemany("insert into labels values (?, ?)", [(i + 1, t) for i, t in enumerate(p.labels)])
    db.commit()
    db.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--checkpoint", default="none")
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd", "sgd-momentum"])
    ap.add_argument("--events", action="store_true")
    ap.add_argument("--gelu-fn", action="store_true")
    ap.add_argument("--capacity", type=int, default=8 << 30)
    ap.add_argument("--root", default="Model", help="the root module's class in the module events' paths (no dot)")
    ap.add_argument("--params", action="store_true", help="parameter and gradient events, the root's module events, zero_grad")
    ap.add_argument("--autocast", action="store_true", help="with --params: bf16 copies of each block's parameters, as autocast makes")
    ap.add_argument("--convert", action="store_true", help="the parameters made in twice their bytes first, then each "
                    "converted (a copy made, the original freed), as model.to(torch.bfloat16) after a model made in fp32")
    ap.add_argument("--keep-grads", action="store_true", help="with --params: zero_grad(set_to_none=False), the gradients made once")
    a = ap.parse_args()
    p = generate(a)
    write(p, a.out, a.capacity)
    print("%s: %d events" % (a.out, len(p.events)), file=sys.stderr)


if __name__ == "__main__":
    main()
