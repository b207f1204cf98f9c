"""Share of the Sample stage a typed link job spends excluding seed edges (issue 20).

Runs a Sampler's training epoch of ``author,writes,paper`` on ``hetero:papers=2000,seed=0``
(``fgnn.tasks.link_typed.TypedLinkSampling.train_sample``, batch 128, fanouts 5,5,
``exclude="reverse"``) five times in this process and times the seed-edge filter
(``seed_edge_filter``: building the per-batch edge sets and every look-up) inside the same calls,
so machine noise hits both alike. Prints one line per round and the median share.

Usage: ``PYTHONPATH=. python bench/typed_link_exclusion.py``
"""
import time, torch
torch.set_num_threads(1)
import fgnn.tasks.link_typed as lt
from fgnn.config import JobConfig, LinkConfig
from fgnn.data import load_dataset
from fgnn.sampling.hetero import HeteroKHop
spec = "hetero:papers=2000,seed=0"
ds = load_dataset(spec)
spent = [0.0]
orig = lt.seed_edge_filter
def timed(*a, **k):
    t0 = time.perf_counter(); f = orig(*a, **k); spent[0] += time.perf_counter() - t0
    def keep(*x):
        t1 = time.perf_counter(); r = f(*x); spent[0] += time.perf_counter() - t1; return r
    return keep
lt.seed_edge_filter = timed
cfg = JobConfig(dataset=spec, task="link", link=LinkConfig(exclude="reverse"))
task = lt.TypedLinkTask.build(cfg, ds); g = task.training_dataset(ds).graph
s = lt.TypedLinkSampling(task.payload(), HeteroKHop((5, 5)))
fr = []
for rnd in range(5):
    spent[0] = 0.0
    gen = torch.Generator().manual_seed(rnd)
    t0 = time.perf_counter()
    for b in torch.randperm(task.size("train"), generator=gen).split(128):
        s.train_sample(g, b, gen)
    tot = time.perf_counter() - t0
    fr.append(spent[0] / tot)
    print(round(tot, 3), round(spent[0], 3), round(spent[0] / tot, 3))
print("median share of the exclusion filter in train_sample:", sorted(fr)[2])
