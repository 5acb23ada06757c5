"""compile_regions.py: PyTorch's test_cuda.py TestCudaMallocAsync.test_memory_compile_regions as a
program that prints what it compares, natively or under memsnap, so that a difference can be read.

The test records PyTorch's history with compile_context=True (the recorder tags each trace entry
with the "Torch-Compiled Region: frame/compile" that made it), runs a compiled model whose
forward breaks its graph at a data-dependent branch, and expects the regions of the entries, with
"N/A" left out and repeats merged, to be [0/0, 1/0, 0/0]. Prints one line "REGIONS {json}": that
sequence, whether it is the expected one, and the entries themselves (action, region, size) in
order, so that the native and memsnap runs can be laid side by side.

usage: compile_regions.py [native | memsnap]   (memsnap: memsnap.enable() first, in this process)
"""
import json

from who import allocator_from_argv

EXPECTED = ["Torch-Compiled Region: 0/0", "Torch-Compiled Region: 1/0", "Torch-Compiled Region: 0/0"]


def main():
    who, kind = allocator_from_argv()
    import torch
    from torch import nn

    class MyModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear1 = nn.Linear(10, 10)
            self.linear2 = nn.Linear(10, 10)

        def forward(self, x):
            x = self.linear1(x)
            if x.sum() > 0:
                x = x + 1
            else:
                x = x - 1
            return self.linear2(x)

    out = {"who": who, "allocator": kind}
    try:
        torch.cuda.memory.empty_cache()
        inp = torch.randn(1, 10, device="cuda")
        model = MyModel().to("cuda")
        compiled = torch.compile(model)
        torch.cuda.memory._record_memory_history(context="all", compile_context=True)
        compiled(inp)
        traces = torch.cuda.memory._snapshot()["device_traces"]
        trace = next((t for t in traces if t), [])
        sequence, entries = [], []
        for e in trace:
            entries.append([e["action"], e.get("compile_context", "?").replace("Torch-Compiled Region: ", ""),
                            e.get("size")])
            context = e.get("compile_context", "N/A")
            if context == "N/A" or (sequence and sequence[-1] == context):
                continue
            sequence.append(context)
        out.update(sequence=[s.replace("Torch-Compiled Region: ", "") for s in sequence], ok=sequence == EXPECTED,
                   entries=entries[:80], n_entries=len(entries))
    except Exception as e:  # noqa: BLE001 - the test passes on a RuntimeError; say which
        out["error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
    finally:
        torch.cuda.memory._record_memory_history(None)
    print("REGIONS " + json.dumps(out))


if __name__ == "__main__":
    main()
