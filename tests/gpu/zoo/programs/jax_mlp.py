"""jax_mlp.py: a JAX program (no PyTorch): an MLP trained by a jitted SGD step on random data, 6
steps.

  python3 jax_mlp.py [--steps 6] [--leak]

--leak keeps every step's batch of activations on the device.
"""
import argparse

import jax
import jax.numpy as jnp

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--leak", action="store_true")
args = p.parse_args()

key = jax.random.PRNGKey(0)
k1, k2 = jax.random.split(key)
params = {"w1": jax.random.normal(k1, (4096, 4096)) * 0.01, "w2": jax.random.normal(k2, (4096, 4096)) * 0.01}


def loss_fn(params, x):
    h = jax.nn.relu(x @ params["w1"])
    return jnp.mean((h @ params["w2"]) ** 2), h


@jax.jit
def step(params, x):
    (loss, h), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss, h


kept = []
for i in range(args.steps):
    x = jax.random.normal(jax.random.fold_in(key, i), (4096, 4096))
    params, loss, h = step(params, x)  # zoo: leak
    if args.leak:
        kept.append(h)
print("loss %.6f" % float(loss), flush=True)
